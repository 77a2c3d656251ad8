"""tokenmill sim: predict a deployment's throughput and latency (issue 17).

step.py prices one engine step on a hardware profile (hardware.py) from the
model's shape (cost.py); serving.py runs our scheduler's rules over those step
times, event by event, for MLPerf's scenarios."""
