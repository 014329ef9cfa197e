"""``--plot out.png``: latency against size, log-log, one line per algorithm or peer.

Needs matplotlib (``pip install 'aluminum[plot]'``); without it ``PlotUnavailable`` says so
and the sweep's table and JSON are still written. Draws off-screen (the Agg backend).
"""
from __future__ import annotations

from pathlib import Path

from .sizes import format_size
from .sweep import Result


class PlotUnavailable(Exception):
    """matplotlib is missing; the message says how to install it."""


def plot(result: Result, path: str | Path) -> Path:
    """Write the latency plot of `result` to `path` (format from its suffix); return it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError as exc:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'aluminum[plot]' "
                              "(or pip install matplotlib)") from exc
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    sizes: set[int] = set()
    for series in result.series:
        points = [pt for pt in series.points if pt.size > 0]
        if not points:
            continue
        sizes.update(pt.size for pt in points)
        style = "--" if series.kind == "peer" else "-"
        ax.plot([pt.size for pt in points], [pt.avg_us for pt in points], style, marker="o",
                markersize=3, label=series.name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if sizes:
        ticks = sorted(sizes)[:: max(1, len(sizes) // 10)]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45)
    mode = "nonblocking" if result.nonblocking else "blocking"
    place = "in place" if result.inplace else "out of place"
    ax.set_title(f"{result.op} on {result.ranks} ranks ({result.backend} backend, "
                 f"{result.dtype}, {place}, {mode})")
    ax.set_xlabel("size")
    ax.set_ylabel("latency (µs, slowest rank, mean over iterations)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    target = Path(path)
    fig.savefig(target)
    plt.close(fig)
    return target
