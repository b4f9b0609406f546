"""The supported head dims come from src/kernels.list (fp8attn._kernel_list), their one source."""

from __future__ import annotations

from pathlib import Path

import pytest

import fp8attn
from fp8attn import _kernel_list

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_source_checkout_reads_src_kernels_list() -> None:
    assert _kernel_list.kernel_list_path() == REPO_ROOT / "src" / "kernels.list"


def test_supported_head_sizes_are_the_lists_pairs() -> None:
    pairs = _kernel_list.parse_head_dims((REPO_ROOT / "src" / "kernels.list").read_text())
    assert fp8attn.SUPPORTED_HEAD_SIZES == frozenset(pairs)
    assert (128, 128) in pairs and (192, 128) in pairs


def test_parse_keeps_order_and_drops_duplicates_and_comments() -> None:
    text = ("# comment\n256 256 128 64\n64 64 64 128   # trailing\n\n256 256 64 64\n128 128 128 128 one_level\n"
            "96 96 64 128 varlen_schedule\n512 512 64 64 q16 swapped\n")
    assert _kernel_list.parse_head_dims(text) == ((256, 256), (64, 64), (128, 128), (96, 96), (512, 512))


@pytest.mark.parametrize("line", ["128 128 128", "128 128 128 128 two_level", "d dv 128 128",
                                  "512 512 64 64 q16 q16"])
def test_parse_rejects_malformed_lines_by_number(line: str) -> None:
    with pytest.raises(ValueError, match=r"kernels.list line 2: cannot parse"):
        _kernel_list.parse_head_dims("64 64 128 128\n" + line)
