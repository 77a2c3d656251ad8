"""PNG plots of benchmark runs: one run's TTFT/TPOT distributions and its
in-process engine's steps, a sweep's throughput-latency curve, and a
comparison across targets.

matplotlib is imported inside each function (importing this module stays
cheap), and figures are drawn on the Agg canvas directly, never through
pyplot, so no display is needed and no global backend state is touched.

Every function returns the path it wrote, or None with a logged reason when
there is nothing to plot (no successful queries, an offline run without TTFT,
an empty sweep); having nothing to plot is never an error.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from tokenmill.bench.report import sweep_point, target_label, unique_labels
from tokenmill.bench.results import BenchResult, Percentiles

log = logging.getLogger(__name__)

_LIMIT_COLOR = "tab:red"
_VALID_COLOR = "tab:green"
_INVALID_COLOR = "tab:red"


def _figure(ncols: int, width_per_panel: float = 5.5, height: float = 4.2):
    """(figure, axes) on an Agg canvas, without pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_per_panel * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path


def _skip(what: str, reason: str) -> None:
    log.warning("%s plot skipped: %s", what, reason)
    return None


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


# ---- one run: TTFT and TPOT distributions ------------------------------------------------


def plot_latency_distributions(result: BenchResult, path: str | Path) -> Path | None:
    """Two panels, TTFT and TPOT: histogram (query counts) with its CDF, p50 and
    p99 marked and the limit drawn where the scenario applies one."""
    ok = [q for q in result.queries if q.ok]
    if not ok:
        return _skip("latency", f"no successful queries in the {result.scenario} run")
    ttft = [q.ttft_s * 1e3 for q in ok if q.ttft_s is not None]  # ms
    tpot = [q.tpot_s * 1e3 for q in ok if q.tpot_s is not None]  # ms
    if not ttft and not tpot:
        return _skip("latency", "no query recorded a first token (TTFT) or two or more tokens (TPOT)")

    settings = result.settings or {}
    # Offline issues everything at t=0: its limits mean nothing, so none is drawn.
    limits_apply = result.scenario != "offline"
    fig, (ax_ttft, ax_tpot) = _figure(2)
    _distribution(ax_ttft, ttft, "TTFT", settings.get("ttft_ms") if limits_apply else None)
    _distribution(ax_tpot, tpot, "TPOT", settings.get("tpot_ms") if limits_apply else None)
    fig.suptitle(f"{target_label(result)}: {result.scenario}, {len(ok)} successful queries, "
                 f"verdict {result.verdict.result}")
    return _save(fig, path)


def _distribution(ax, values_ms: list[float], name: str, limit_ms: float | None) -> None:
    ax.set_title(f"{name} distribution")
    ax.set_xlabel(f"{name} (ms)")
    if not values_ms:
        why = "no first tokens recorded" if name == "TTFT" else "no query produced 2+ tokens"
        ax.text(0.5, 0.5, f"no {name} data\n({why})", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return
    bins = min(50, max(5, int(math.sqrt(len(values_ms)))))
    ax.hist(values_ms, bins=bins, range=_hist_range(values_ms), color="tab:blue", alpha=0.6, label="queries")
    ax.set_ylabel("queries")

    cdf = ax.twinx()
    xs = sorted(values_ms)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    cdf.step(xs, ys, where="post", color="tab:gray", linewidth=1.2, label="CDF")
    cdf.set_ylim(0, 1.02)
    cdf.set_ylabel("cumulative fraction of queries")

    p = Percentiles.of([v / 1e3 for v in values_ms])  # takes seconds, gives ms
    ax.axvline(p.p50, color="tab:orange", linestyle="--", label=f"p50 {p.p50:,.1f} ms")
    ax.axvline(p.p99, color="tab:purple", linestyle="-.", label=f"p99 {p.p99:,.1f} ms")
    if _finite(limit_ms):
        ax.axvline(limit_ms, color=_LIMIT_COLOR, linewidth=2, label=f"limit {limit_ms:,.0f} ms")
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = cdf.get_legend_handles_labels()
    ax.legend(handles + h2, labels + l2, loc="best", fontsize="small")


def _hist_range(values: list[float]) -> tuple[float, float]:
    """The histogram's range. Equal values (every TPOT 20 ms, give or take float
    rounding) leave numpy no room for finite-width bins, so a spread narrower
    than 0.1% of the value is widened to +-5% around it."""
    lo, hi = min(values), max(values)
    if hi - lo > 1e-3 * max(abs(hi), 1e-9):
        return lo, hi
    mid = (lo + hi) / 2
    pad = max(abs(mid) * 0.05, 1e-3)
    return mid - pad, mid + pad


# ---- a sweep: throughput against tail latency ---------------------------------------------


def plot_sweep(results: list[BenchResult], path: str | Path) -> Path | None:
    """Two panels, p99 TTFT and p99 TPOT (ms) against output tokens/s, one point
    per sweep point (labelled with its QPS or concurrency), VALID points as green
    circles and the rest as red crosses, limits as horizontal lines."""
    if not results:
        return _skip("sweep", "no results")
    points = sorted((r for r in results if r.metrics.tokens_per_s > 0),
                    key=lambda r: (sweep_point(r)[1] or 0.0, r.metrics.tokens_per_s))
    if not points:
        return _skip("sweep", "no point produced any tokens")
    has_ttft = any(r.metrics.ttft_ms for r in points)
    has_tpot = any(r.metrics.tpot_ms for r in points)
    if not has_ttft and not has_tpot:
        return _skip("sweep", "no point has TTFT or TPOT figures")

    settings = points[0].settings or {}
    limits_apply = points[0].scenario != "offline"
    fig, (ax_ttft, ax_tpot) = _figure(2)
    _sweep_panel(ax_ttft, points, "ttft_ms", "TTFT", settings.get("ttft_ms") if limits_apply else None)
    _sweep_panel(ax_tpot, points, "tpot_ms", "TPOT", settings.get("tpot_ms") if limits_apply else None)
    axis = sweep_point(points[0])[0]
    fig.suptitle(f"{target_label(points[0])}: {points[0].scenario} sweep over {axis}, "
                 f"{len(points)} points")
    return _save(fig, path)


def _sweep_panel(ax, points: list[BenchResult], key: str, name: str, limit_ms: float | None) -> None:
    ax.set_title(f"throughput vs p99 {name}")
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel(f"p99 {name} (ms)")
    xy = [(r, r.metrics.tokens_per_s, getattr(r.metrics, key).p99) for r in points if getattr(r.metrics, key)]
    if not xy:
        ax.text(0.5, 0.5, f"no {name} data", ha="center", va="center", transform=ax.transAxes)
        return
    ax.plot([x for _, x, _ in xy], [y for _, _, y in xy], color="tab:gray", linewidth=1, zorder=1)
    for valid, marker, color, label in ((True, "o", _VALID_COLOR, "VALID"), (False, "X", _INVALID_COLOR, "INVALID")):
        chosen = [(x, y) for r, x, y in xy if r.verdict.valid == valid]
        if chosen:
            ax.scatter(*zip(*chosen), marker=marker, color=color, s=50, zorder=2, label=label)
    for r, x, y in xy:
        kind, value = sweep_point(r)
        if value is not None:
            text = f"{value:g} qps" if kind == "target QPS" else f"c={value:g}"
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    if _finite(limit_ms):
        ax.axhline(limit_ms, color=_LIMIT_COLOR, linestyle="--", label=f"limit {limit_ms:,.0f} ms")
    # Headroom so the point labels and the limit line stay inside the frame.
    top = max([y for _, _, y in xy] + ([limit_ms] if _finite(limit_ms) else []))
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    ax.legend(fontsize="small")


# ---- targets side by side -----------------------------------------------------------------


def plot_comparison(results: list[BenchResult], path: str | Path) -> Path | None:
    """Three bar panels across targets: output tokens/s, p99 TTFT, p99 TPOT.
    INVALID runs are hatched; a missing figure shows as 'n/a'."""
    if not results:
        return _skip("comparison", "no results")
    if not any(r.metrics.tokens_per_s > 0 for r in results):
        return _skip("comparison", "no target produced any tokens")
    labels = unique_labels(results)
    panels = [  # (title, y-axis label with unit, one value per target)
        ("throughput", "output tokens/s", [r.metrics.tokens_per_s for r in results]),
        ("p99 TTFT", "p99 TTFT (ms)", [r.metrics.ttft_ms.p99 if r.metrics.ttft_ms else None for r in results]),
        ("p99 TPOT", "p99 TPOT (ms)", [r.metrics.tpot_ms.p99 if r.metrics.tpot_ms else None for r in results]),
    ]
    fig, axes = _figure(3, width_per_panel=4.2)
    for ax, (title, ylabel, values) in zip(axes, panels):
        _bars(ax, labels, values, [r.verdict.valid for r in results])
        ax.set_title(title)
        ax.set_ylabel(ylabel)
    fig.suptitle(f"{results[0].scenario}, workload {(results[0].workload or {}).get('name', '-')}: "
                 f"{len(results)} targets (hatched: INVALID)")
    return _save(fig, path)


def _bars(ax, labels: list[str], values: list[float | None], valid: list[bool]) -> None:
    heights = [v if _finite(v) else 0.0 for v in values]
    xs = range(len(labels))
    bars = ax.bar(xs, heights, color="tab:blue")
    for bar, ok in zip(bars, valid):
        if not ok:
            bar.set_hatch("//")
            bar.set_edgecolor("white")
    ax.bar_label(bars, labels=[f"{v:,.1f}" if _finite(v) else "n/a" for v in values], fontsize="small")
    ax.set_xticks(list(xs), labels, rotation=20, ha="right")
    top = max(heights)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)  # room for the value labels


# ---- one run: the in-process engine's steps ------------------------------------------------------


def plot_engine_steps(steps: list, path: str | Path) -> Path | None:
    """Two panels of a run's engine steps (engine/step_log.py ``LoggedStep``s, starts on the run's
    clock): each step's milliseconds against its decodes, decode-only steps apart from those that
    computed prompt tokens (what a step costs at each batch); and the same milliseconds over the run,
    coloured by decodes (where the batch grew, and any stall)."""
    if not steps:
        return _skip("engine steps", "the run logged no step")
    fig, (by_batch, over_run) = _figure(2)
    ms = [s.seconds * 1e3 for s in steps]
    for prompt, marker, label in ((False, "o", "decode-only"), (True, "^", "with prompt tokens")):
        pick = [i for i, s in enumerate(steps) if bool(s.chunks) == prompt]
        if pick:
            by_batch.scatter([steps[i].decodes for i in pick], [ms[i] for i in pick], s=8, marker=marker,
                             alpha=0.5, label=f"{label} ({len(pick):,})")
    by_batch.set_xlabel("decoding sequences in the step")
    by_batch.set_ylabel("step (ms)")
    by_batch.set_title("step time by batch")
    by_batch.legend(loc="upper left")
    dots = over_run.scatter([s.start for s in steps], ms, c=[s.decodes for s in steps], s=6, cmap="viridis")
    fig.colorbar(dots, ax=over_run, label="decoding sequences")
    over_run.set_xlabel("time in the run (s)")
    over_run.set_ylabel("step (ms)")
    over_run.set_title(f"{len(steps):,} steps, {sum(ms) / 1e3:,.1f} s busy")
    return _save(fig, path)
