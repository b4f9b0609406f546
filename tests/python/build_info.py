"""What this build compiled, for tests that may skip only in a dev build (FP8ATTN_HEAD_DIMS subset).

Torch-free: the declared head-dim pairs come from src/kernels.list (the one list of kernels), the compiled
ones from the loaded library's fp8attn_compiled_kernels().
"""

from __future__ import annotations

import re
from pathlib import Path

import fp8attn

KERNELS_LIST = Path(__file__).resolve().parents[2] / "src" / "kernels.list"


def declared_head_dims() -> set[tuple[int, int]]:
    """(d, dv) of every kernel src/kernels.list declares."""
    pairs = set()
    for line in KERNELS_LIST.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            pairs.add((int(fields[0]), int(fields[1])))
    return pairs


def compiled_head_dims() -> set[tuple[int, int]]:
    """(d, dv) of every kernel in the loaded library (lines "d=128 dv=128 block_m=...")."""
    pairs = set()
    for line in fp8attn.compiled_kernels():
        match = re.search(r"\bd=(\d+) dv=(\d+)\b", line)
        if match:
            pairs.add((int(match.group(1)), int(match.group(2))))
    return pairs


def missing_head_dims() -> list[tuple[int, int]]:
    """Declared pairs this build did not compile: empty for a full build (where nothing may be skipped)."""
    return sorted(declared_head_dims() - compiled_head_dims())
