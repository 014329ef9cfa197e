"""Print a sweep on rank 0 as a table, and save or reload it as JSON or CSV.

The table has one row per (size, series): ``Size`` in bytes, ``Avg``/``Min``/``Max``
latency in µs, ``algbw`` and ``busbw`` in GB/s (10⁹ bytes/s, nccl-tests' formulas), and for
each peer the ratio of our Avg to the peer's Avg at that size (below 1 means we are faster).
``*`` marks the fastest series at each size. When several series ran, a compact matrix of Avg
latencies per size follows, one column per series.

JSON (``aluminum-bench/1``) holds the whole ``Result``; ``from_json(to_json(r)) == r``.
CSV has one line per (series, size) with the run's settings repeated on every line.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any, TextIO

from .ops import spec
from .sizes import format_size
from .sweep import SHARED_SUFFIX, Point, Result, Series

FORMAT = "aluminum-bench/1"
_BUS_FORMULAS = {"_all_reduce_factor": "2(p-1)/p", "_share_factor": "(p-1)/p",
                 "_one": "1", "_zero": "0 (no data)"}
CSV_FIELDS = ("op", "backend", "ranks", "dtype", "inplace", "nonblocking", "series", "kind",
              "algo", "size", "iters", "avg_us", "min_us", "max_us", "median_us",
              "algbw_gbps", "busbw_gbps")


def to_json(result: Result) -> dict[str, Any]:
    """The result as a JSON-ready dict (format ``aluminum-bench/1``)."""
    return {"format": FORMAT, **dataclasses.asdict(result)}


def from_json(data: dict[str, Any]) -> Result:
    """Rebuild a Result from `to_json`'s output; ValueError for another format."""
    if data.get("format") != FORMAT:
        raise ValueError(f"expected a {FORMAT!r} benchmark result, got format "
                         f"{data.get('format')!r}")
    fields = {k: v for k, v in data.items() if k not in ("format", "series")}
    series = [Series(s["name"], s["kind"], [Point(**pt) for pt in s["points"]],
                     s.get("skipped", "")) for s in data["series"]]
    return Result(series=series, **fields)


def dumps_json(result: Result) -> str:
    return json.dumps(to_json(result), indent=1) + "\n"


def load_json(path: str) -> Result:
    """Read a result saved with ``--json``."""
    with open(path, encoding="utf-8") as handle:
        return from_json(json.load(handle))


def write_csv(result: Result, out: TextIO) -> None:
    """One CSV line per (series, size), headed by CSV_FIELDS."""
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    common = {k: getattr(result, k) for k in CSV_FIELDS[:6]}
    for series in result.series:
        for point in series.points:
            row = {**common, "series": series.name, "kind": series.kind,
                   **dataclasses.asdict(point)}
            writer.writerow(row)


def dumps_csv(result: Result) -> str:
    out = io.StringIO()
    write_csv(result, out)
    return out.getvalue()


def ratio(ours: float, theirs: float) -> str:
    """``"0.62x"``: our latency over the peer's (below 1: we are faster)."""
    return f"{ours / theirs:.2f}x" if theirs > 0 else "-"


def header(result: Result) -> list[str]:
    """The comment lines that say what ran and how to read the numbers."""
    factor = spec(result.op).bus_factor.__name__
    place = "in place" if result.inplace else "out of place"
    mode = "nonblocking (start + wait)" if result.nonblocking else "blocking"
    per_node = f" ({result.ranks_per_node} per node)" if result.ranks_per_node else ""
    lines = [f"# aluminum.bench {result.op}: backend {result.backend}, {result.ranks} ranks"
             f"{per_node}, {result.dtype}, {place}, {mode}"]
    if result.mpi or result.host:
        lines.append(f"# {result.mpi} on {result.host}, {result.created}")
    if result.link:
        lines.append(f"# link between nodes: {result.link}")
    lines += ["# Latency in us: per iteration the slowest rank; Avg/Min/Max over iterations.",
              f"# algbw = Size/Avg, busbw = algbw x {_BUS_FORMULAS[factor]} (nccl-tests), GB/s."
              " * = fastest at that size."]
    peers = [s.name for s in result.series if s.kind == "peer" and s.points]
    if peers:
        lines.append("# x<peer> = our Avg / the peer's Avg (below 1: we are faster).")
    for series in result.series:
        if series.skipped:
            lines.append(f"# {series.name}: not measured ({series.skipped})")
    return lines


def _label(series: Series, point: Point) -> str:
    return f"{series.name}->{point.algo}" if point.algo and point.algo != series.name \
        else series.name


def format_table(result: Result) -> str:
    """The full text report: header, one row per (size, series), then the Avg matrix."""
    measured = [s for s in result.series if s.points]
    peers = [s for s in measured if s.kind == "peer"]
    by_size: dict[int, dict[str, tuple[Series, Point]]] = {}
    for series in measured:
        for point in series.points:
            by_size.setdefault(point.size, {})[series.name] = (series, point)
    labels = [_label(s, pt) for row in by_size.values() for s, pt in row.values()]
    width = max([len("Series")] + [len(label) + 1 for label in labels])
    titles = ["Size", "Series".ljust(width), "Iters", "Avg(us)", "Min(us)", "Max(us)",
              "algbw(GB/s)", "busbw(GB/s)"] + [f"x{p.name}" for p in peers]
    widths = [12, width, 6, 10, 10, 10, 12, 12] + [max(9, len(p.name) + 2) for p in peers]
    lines = header(result)
    lines.append("#" + " ".join(t.rjust(w) if i != 1 else t for i, (t, w)
                                in enumerate(zip(titles, widths)))[1:])
    for size in sorted(by_size):
        row = by_size[size]
        fastest = min(row.values(), key=lambda sp: sp[1].avg_us)[0].name
        for series, point in row.values():
            label = _label(series, point) + ("*" if series.name == fastest else "")
            cells = [str(size), label.ljust(width), str(point.iters), f"{point.avg_us:.2f}",
                     f"{point.min_us:.2f}", f"{point.max_us:.2f}", f"{point.algbw_gbps:.3f}",
                     f"{point.busbw_gbps:.3f}"]
            for peer in peers:
                theirs = row.get(peer.name)
                cells.append(ratio(point.avg_us, theirs[1].avg_us)
                             if theirs and series.kind == "ours" else "")
            lines.append(" ".join(c.rjust(w) if i != 1 else c for i, (c, w)
                                  in enumerate(zip(cells, widths))))
        if len(row) > 1:
            lines.append("")
    if len(measured) > 1:
        lines += ["", *format_matrix(result)]
    lines += automatic_summary(result)
    return "\n".join(lines).rstrip() + "\n"


def automatic_rows(result: Result, buffers: str = "") -> list[
        tuple[int, float, str, float | None, str, float]]:
    """Per size where "automatic" and other algorithms of ours ran: (size, automatic's
    median, the algorithm it ran, that algorithm's own column's median or None without one,
    the fastest column, its median); medians, as the tuner decides by them.  Automatic vs its
    algorithm's column is one code measured twice in one run, i.e. how far apart the run's
    noise alone puts two medians.  ``buffers``: "" compares the series on private buffers,
    ``SHARED_SUFFIX`` those on shared ones (``automatic [shared]`` with the other
    ``[shared]`` columns; the fastest column is named without the suffix); never the one
    with the other: they measure other buffers, not another choice."""
    def of_kind(name: str) -> bool:
        return name.endswith(SHARED_SUFFIX) == bool(buffers)

    auto_name = "automatic" + buffers
    ours = {s.name[:len(s.name) - len(buffers)]: {pt.size: pt.median_us for pt in s.points}
            for s in result.series if s.kind == "ours" and s.points and s.name != auto_name
            and of_kind(s.name)}
    auto = next((s for s in result.series if s.kind == "ours" and s.name == auto_name), None)
    rows = []
    for pt in sorted(auto.points if auto else (), key=lambda pt: pt.size):
        times = {name: by_size[pt.size] for name, by_size in ours.items() if pt.size in by_size}
        if times:
            fastest = min(times, key=times.get)
            rows.append((pt.size, pt.median_us, pt.algo, times.get(pt.algo), fastest,
                         times[fastest]))
    return rows


# How close "automatic" must be to the fastest algorithm to count as having chosen well:
# within 10%, or within 2 µs where the fastest takes under 20 µs (where 10% is below what
# this machine's noise moves a median).
CLOSE_RATIO = 1.10
CLOSE_SMALL_US, CLOSE_SMALL_BELOW_US = 2.0, 20.0


def close_to_fastest(auto_us: float, fastest_us: float) -> bool:
    """Whether automatic's median is close enough to the fastest column's (see above)."""
    if auto_us <= fastest_us * CLOSE_RATIO:
        return True
    return fastest_us < CLOSE_SMALL_BELOW_US and auto_us - fastest_us <= CLOSE_SMALL_US


def automatic_summary(result: Result) -> list[str]:
    """How far "automatic" is from the fastest explicit algorithm, at worst; and, to judge
    that by, how far apart the run measured automatic and the algorithm it ran, at worst.
    The same for ``automatic [shared]`` among the columns on shared buffers, where the
    sweep ran them."""
    return [line for buffers in ("", SHARED_SUFFIX)
            for line in _automatic_summary(automatic_rows(result, buffers),
                                           "automatic" + buffers)]


def _automatic_summary(rows: list, automatic: str) -> list[str]:
    if not rows:
        return []
    size, auto, _, _, name, best = max(rows, key=lambda r: r[1] / r[5] if r[5] > 0 else 1.0)
    lines = ["", f"# {automatic} vs the fastest algorithm at each size (medians): worst "
                 f"{ratio(auto, best)} at {size} B ({auto:.2f} us vs {name} {best:.2f} us)"]
    far = [f"{format_size(size)} ({ratio(auto, best)}, +{auto - best:.1f} us)"
           for size, auto, _, _, _, best in rows if not close_to_fastest(auto, best)]
    lines.append(f"# {automatic} within {CLOSE_RATIO - 1:.0%} of the fastest (or "
                 f"{CLOSE_SMALL_US:g} us below {CLOSE_SMALL_BELOW_US:g} us): "
                 f"{len(rows) - len(far)} of {len(rows)} sizes"
                 + (f"; not at {', '.join(far)}" if far else ""))
    choices = [row for row in rows if row[3] is not None]
    if choices:
        misses = [f"{format_size(size)} ({algo}, {ratio(own, best)} {fastest})"
                  for size, _, algo, own, fastest, best in choices if algo != fastest]
        lines.append(f"# {automatic} ran the fastest algorithm at "
                     f"{len(choices) - len(misses)} of {len(choices)} sizes"
                     + (f"; not at {', '.join(misses)}" if misses else ""))
        size, auto, name, own, _, _ = max(choices, key=lambda c: max(c[1], c[3]) / max(
            min(c[1], c[3]), 1e-9))
        lines.append(f"# noise: {automatic} vs the column of the algorithm it ran, the same "
                     f"code measured twice: worst {ratio(auto, own)} at {size} B "
                     f"({auto:.2f} us vs {name} {own:.2f} us)")
    return lines


def format_matrix(result: Result) -> list[str]:
    """Avg latency (µs) per size, one column per series; * marks the fastest."""
    measured = [s for s in result.series if s.points]
    widths = [max(10, len(s.name) + 2) for s in measured]
    lines = [f"# {result.op} on {result.ranks} ranks: Avg latency (us) by size",
             "#" + "Size".rjust(11) + "".join(
        s.name.rjust(w) for s, w in zip(measured, widths))]
    sizes = sorted({pt.size for s in measured for pt in s.points})
    for size in sizes:
        avgs = [next((pt.avg_us for pt in s.points if pt.size == size), None) for s in measured]
        best = min(a for a in avgs if a is not None)
        cells = [("-" if a is None else f"{a:.2f}" + ("*" if a == best else " ")).rjust(w)
                 for a, w in zip(avgs, widths)]
        lines.append(str(size).rjust(12) + "".join(cells))
    return lines
