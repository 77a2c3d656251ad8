"""Workload builders for ``tokenmill bench`` (synthetic, shared-prefix,
multi-turn, JSONL, ShareGPT); the Sample/Workload types live in bench/workload.py."""
