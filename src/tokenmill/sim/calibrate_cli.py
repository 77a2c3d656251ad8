"""``tokenmill sim calibrate``'s command: fit and write a profile (sim/calibrate.py) and print what
it measured, or with ``--check`` time the same steps again and price them on the saved profile."""

from __future__ import annotations

import argparse


def _point_name(point: tuple[int, int]) -> str:
    """A calibrated step in words (sim/calibrate.py ``point_shape``)."""
    from tokenmill.sim.calibrate import CACHED_CONTEXT, CACHED_STEP, LONG_CONTEXT, LONG_DECODE

    batch, tokens = point
    if not tokens:
        return f"decode step, batch {batch}" + (f" over {LONG_CONTEXT}-token contexts" if point == LONG_DECODE else "")
    return f"prefill of {tokens} tokens" + (f" over {CACHED_CONTEXT} cached" if point == CACHED_STEP else "") + \
        (f" beside {batch} decodes" if batch else "")


def run_calibrate(args: argparse.Namespace) -> int:
    """`tokenmill sim calibrate`: fit and write the profile, or with ``--check`` price its steps
    against their time now."""
    from tokenmill.sim.calibrate import CACHED_STEP, ENGINE_FIELDS, LONG_DECODE, calibrate, profile_path

    engine = {f: getattr(args, f) for f in ENGINE_FIELDS}
    if args.check:
        return _check_profile(args, engine)
    profile, points, error, priced = calibrate(args.dtype, args.num_threads, args.device, args.model,
                                                 args.profile, engine, tuple(args.prefill_tokens))
    e = profile.efficiency
    print(f"{profile.name} ({profile.sources[0].split(': ', 1)[1]}): memory read {profile.memory_bw / 1e9:.1f} GB/s, "
          f"{profile.default_precision} GEMM {profile.flops[profile.default_precision] / 1e9:.0f} GFLOP/s")
    for point, seconds in points:
        price = priced.get(point)
        check = "" if price is None else f"; the profile prices it at {price * 1e3:.2f} ms, " \
                                         f"{price / seconds:.2f}x the measured)"
        if point == CACHED_STEP:
            check = " (not fitted" + check
        elif point == LONG_DECODE:
            check = f" (fits the K/V read rate alone: {e.kv_read:.2f} of the memory read rate" + check
        print(f"  engine {_point_name(point)}: {seconds * 1e3:.2f} ms{check}")
    eager = "" if e.eager_step_overhead_s is None else f" ({e.eager_step_overhead_s * 1e3:.2f} ms for an eager step)"
    print(f"fitted efficiency: memory {e.memory:.2f}, gemm {e.gemm:.2f}; host overhead {e.step_overhead_s * 1e3:.2f} "
          f"ms per step{eager} + {e.seq_overhead_s * 1e6:.1f} us per sequence; compute and memory "
          f"{'overlapped' if profile.overlap else 'added'}; largest step-time error {error * 100:.1f}%")
    print(f"wrote {profile_path(args.profile)}")
    return 0


def _check_profile(args: argparse.Namespace, engine: dict) -> int:
    """``calibrate --check``: the saved profile's price of each calibrated step against its time now."""
    import statistics

    from tokenmill.sim.calibrate import check_profile

    profile, rows = check_profile(args.dtype, args.num_threads, args.device, args.model, args.profile, engine,
                                  tuple(args.prefill_tokens))
    print(f"{profile.name} ({profile.sources[0]}), its steps timed again now:")
    for point, seconds, price in rows:
        print(f"  engine {_point_name(point)}: {seconds * 1e3:.2f} ms, priced {price * 1e3:.2f} ms "
              f"({price / seconds:.2f}x)")
    ratios = [price / seconds for _, seconds, price in rows]
    print(f"the profile prices this machine's steps at {statistics.median(ratios):.2f}x their time now (median of "
          f"{len(ratios)}; {min(ratios):.2f}-{max(ratios):.2f}x); nothing written (calibrate again without --check "
          "to refit)")
    return 0
