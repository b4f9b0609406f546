"""What this build compiled, for tests that may skip only in a dev build (FP8ATTN_HEAD_DIMS subset).

Torch-free: the declared head-dim pairs come from src/kernels.list (the one list of kernels), the compiled
ones from the loaded library's fp8attn_compiled_kernels().
"""

from __future__ import annotations

import re

import fp8attn
from fp8attn import _kernel_list


def declared_head_dims() -> set[tuple[int, int]]:
    """(d, dv) of every kernel src/kernels.list declares."""
    return set(_kernel_list.parse_head_dims(_kernel_list.kernel_list_path().read_text()))


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
