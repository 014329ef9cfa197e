"""Message sizes: parse ``--sizes 4:64MiB`` and print byte counts the way people read them.

Units are binary (``KiB``, ``MiB``, ``GiB``; ``K``/``M``/``G`` and ``KB``/``MB``/``GB`` mean
the same powers of 1024, as in OSU and nccl-tests). A range ``lo:hi`` runs from ``lo`` to
``hi`` multiplying by ``step`` (2 by default, ``--step 4`` for powers of 4); ``hi`` is always
included. A comma list names sizes one by one: ``--sizes 8,1KiB,1MiB``.
"""
from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
          "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``"64MiB"`` -> 67108864; raise ValueError naming the text when it is not a size."""
    match = _SIZE.match(text)
    unit = match and _UNITS.get(match.group(2).lower())
    if not unit:
        raise ValueError(f"expected a size such as 4, 1KiB or 64MiB, got {text!r}")
    return int(match.group(1)) * unit


def parse_sizes(text: str, step: int = 2) -> list[int]:
    """Parse ``lo:hi`` (geometric, factor `step`, `hi` included) or ``a,b,c``; ascending, unique."""
    if step < 2:
        raise ValueError(f"step: expected an integer >= 2, got {step}")
    if ":" in text:
        lo_text, hi_text = text.split(":", 1)
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo < 1 or hi < lo:
            raise ValueError(f"expected lo:hi with 1 <= lo <= hi, got {text!r}")
        sizes = []
        size = lo
        while size < hi:
            sizes.append(size)
            size *= step
        sizes.append(hi)
    else:
        sizes = [parse_size(part) for part in text.split(",") if part.strip()]
        if not sizes:
            raise ValueError(f"expected at least one size, got {text!r}")
    return sorted(set(sizes))


def format_size(nbytes: int) -> str:
    """67108864 -> ``"64MiB"``, 1536 -> ``"1.5KiB"``, 12 -> ``"12B"``; a count that is not
    a whole number of tenths of a unit stays in bytes (1048572 -> ``"1048572B"``)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and (nbytes * 10) % scale == 0:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{nbytes}B"
