"""The supported (head_dim, head_dim_v) pairs, read from src/kernels.list: their one source.

The list declares every compiled forward kernel as ``d dv block_m block_n [one_level] [varlen_schedule] [q16] [swapped]``
(``#`` starts a comment); its (d, dv) pairs, in order, are the supported head dims (cmake/kernels.cmake
generates the same list for the C++ side). An installed wheel carries the file next to this module
(cmake/install.cmake); a source checkout reads <repo>/src/kernels.list. Neither torch nor libfp8attn.so is needed.
"""

from __future__ import annotations

import functools
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_CANDIDATES = (_PACKAGE_DIR / "kernels.list", _PACKAGE_DIR.parent.parent / "src" / "kernels.list")


def kernel_list_path() -> Path:
    """The kernels.list this package reads: the wheel's copy, else the source checkout's."""
    for path in _CANDIDATES:
        if path.is_file():
            return path
    raise FileNotFoundError(
        "fp8attn: kernels.list not found (looked in: " + ", ".join(str(p) for p in _CANDIDATES) + "); "
        "install the package with `pip install .` or use it from a source checkout")


# The words a kernel line may carry after its four numbers, each at most once (cmake/kernels.cmake reads the same).
_FLAGS = ("one_level", "varlen_schedule", "q16", "swapped")


def parse_head_dims(text: str) -> tuple[tuple[int, int], ...]:
    """The distinct (d, dv) pairs of a kernels.list text, in order of first appearance."""
    pairs: list[tuple[int, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        flags = line[4:]
        well_formed = (len(line) >= 4 and all(f.isdigit() for f in line[:4])
                       and all(f in _FLAGS for f in flags) and len(set(flags)) == len(flags))
        if not well_formed:
            raise ValueError(f"fp8attn: kernels.list line {number}: cannot parse {raw.strip()!r} "
                             "(expected: d dv block_m block_n [one_level] [varlen_schedule] [q16] [swapped])")
        pair = (int(line[0]), int(line[1]))
        if pair not in pairs:
            pairs.append(pair)
    return tuple(pairs)


@functools.lru_cache(maxsize=None)
def supported_head_dims() -> tuple[tuple[int, int], ...]:
    """Every supported (head_dim, head_dim_v) pair, in kernels.list's order."""
    return parse_head_dims(kernel_list_path().read_text())
