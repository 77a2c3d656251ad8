"""Cluster serving: many engine workers behind one frontend (router, workers, disaggregation)."""
