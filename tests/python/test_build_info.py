"""build_info (what may be skipped in a dev build) against the package's own list of head dims."""

from __future__ import annotations

import build_info
from fp8attn import SUPPORTED_HEAD_SIZES


def test_kernels_list_declares_every_supported_head_dim_pair() -> None:
    assert build_info.declared_head_dims() == set(SUPPORTED_HEAD_SIZES)
