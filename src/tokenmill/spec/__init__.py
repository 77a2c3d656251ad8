"""Speculative decoding: draft proposers behind one interface (proposer.py),
the user's ``--speculative-config`` (config.py). The engine verifies drafts in
its own steps (engine/scheduler.py, engine/verify.py)."""
