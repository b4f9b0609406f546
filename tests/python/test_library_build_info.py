"""cmake/build_info.cmake: the build_info.json written beside libfp8attn.so, which the benchmarks record as the
measured library's commit (bench/bench_common.py, run_metadata). No GPU, no torch: it runs the script itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "cmake" / "build_info.cmake"


def _run(src: Path, out: Path) -> dict:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not on PATH")
    subprocess.run([cmake, f"-DSRC={src}", f"-DOUT={out}", "-DHEAD_DIMS=128,256", "-P", str(SCRIPT)], check=True)
    return json.loads(out.read_text())


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_records_this_checkouts_commit(tmp_path: Path) -> None:
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    info = _run(REPO, tmp_path / "build_info.json")
    assert info["commit"] == _git("rev-parse", "HEAD")
    assert info["dirty"] == bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert info["head_dims"] == "128,256"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    info = _run(src, tmp_path / "build_info.json")
    assert info == {"commit": "unknown", "dirty": False, "head_dims": "128,256"}


def test_unchanged_content_is_not_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "build_info.json"
    _run(tmp_path, out)
    stamped = out.stat().st_mtime_ns - 10**9  # a second in the past, so that a rewrite would show
    os.utime(out, ns=(stamped, stamped))
    _run(tmp_path, out)
    assert out.stat().st_mtime_ns == stamped, "an identical build_info.json was written again (rebuilds dependents)"
