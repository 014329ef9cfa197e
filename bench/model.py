"""``python -m aluminum.bench model``: predicted times per algorithm and the crossover sizes.

Uses the α-β model of aluminum/tuning/costmodel.py. α and β default to the ``model`` entry of the
tuning table in use (the tuner fits them to a ping-pong), else the selector's defaults.
Crossovers are exact to the byte: between two sizes of the sweep whose winners differ, the
first size where the new winner takes over is found by bisection.
"""
from __future__ import annotations

import re
from typing import Sequence

from aluminum.tuning import costmodel, selector

from .sizes import format_size

_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_TIME = re.compile(r"^\s*([0-9.eE+-]+)\s*(s|ms|us|µs|ns)?\s*(/B)?\s*$")


def parse_seconds(text: str) -> float:
    """``"2e-6"``, ``"2us"``, ``"0.15ns"`` (β may end in ``/B``) -> seconds; ValueError else."""
    match = _TIME.match(text)
    try:
        value = float(match.group(1)) * _TIME_UNITS[match.group(2) or ""] if match else -1.0
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"expected a time >= 0 such as 2e-6, 2us or 0.15ns, got {text!r}")
    return value


def default_parameters() -> costmodel.AlphaBeta:
    """α, β of the table in use, else the selector's built-in defaults."""
    model = selector.current_table().model
    return model or costmodel.AlphaBeta(selector.DEFAULT_ALPHA, selector.DEFAULT_BETA)


def exact_crossovers(op: str, p: int, alpha: float, beta: float, candidates: Sequence[str],
                     sizes: Sequence[int]) -> list[tuple[int, str]]:
    """(first byte count where the winner changes, new winner), refined by bisection."""
    exact = []
    ordered = sorted(sizes)
    for size, winner in costmodel.crossovers(op, p, alpha, beta, candidates, ordered):
        lo = max(s for s in ordered if s < size)   # the previous winner still wins here
        hi = size
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if costmodel.best(op, p, mid, alpha, beta, candidates) == winner:
                hi = mid
            else:
                lo = mid
        exact.append((hi, winner))
    return exact


def format_model(op: str, p: int, alpha: float, beta: float, sizes: Sequence[int],
                 candidates: Sequence[str] | None = None) -> str:
    """The model's table for `op`: predicted µs per algorithm per size, best, crossovers."""
    names = list(candidates or costmodel.algorithms(op))
    widths = [max(10, len(n) + 2) for n in names]
    bandwidth = f" ({1 / beta / 1e9:.2f} GB/s)" if beta > 0 else ""
    lines = [f"# alpha-beta model: {op} on {p} ranks, alpha = {alpha * 1e6:.3g} us, "
             f"beta = {beta * 1e9:.4g} ns/B{bandwidth}; times in us",
             "#" + "Size".rjust(11) + "".join(n.rjust(w) for n, w in zip(names, widths))
             + "  best"]
    for size in sorted(sizes):
        times = [costmodel.predict(op, n, p, size, alpha, beta) * 1e6 for n in names]
        best = costmodel.best(op, p, size, alpha, beta, names)
        lines.append(str(size).rjust(12) + "".join(f"{t:.2f}".rjust(w)
                                                   for t, w in zip(times, widths))
                     + f"  {best}")
    first = costmodel.best(op, p, min(sizes), alpha, beta, names)
    steps = [f"{first} from {format_size(min(sizes))}"] + [
        f"{winner} from {size} B ({format_size(size)})"
        for size, winner in exact_crossovers(op, p, alpha, beta, names, sizes)]
    lines.append("# crossovers: " + "; ".join(steps))
    return "\n".join(lines) + "\n"
