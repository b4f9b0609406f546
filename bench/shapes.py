"""Where the decode benchmark shapes live (torch-free, so that bench_vllm.py --dry-run needs no torch)."""

from __future__ import annotations

import os
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def shapes_path() -> Path:
    """decode_shapes.json: $FP8ATTN_DECODE_SHAPES, else ../shared/bench/, else bench/."""
    env = os.environ.get("FP8ATTN_DECODE_SHAPES")
    if env:
        if not Path(env).is_file():
            raise SystemExit(f"FP8ATTN_DECODE_SHAPES={env} is not a file")
        return Path(env)
    for candidate in (BENCH_DIR.parent.parent / "shared" / "bench" / "decode_shapes.json",
                      BENCH_DIR / "decode_shapes.json"):
        if candidate.is_file():
            return candidate
    raise SystemExit("decode_shapes.json not found: set FP8ATTN_DECODE_SHAPES, or put it in ../shared/bench/ or bench/")
