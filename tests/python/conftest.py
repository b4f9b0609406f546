"""pytest setup for the Python package: import path, per-test seeding, and the ``gpu`` marker.

Tests marked ``gpu`` need torch, a CUDA SM90 device and a built libfp8attn.so; without them they are
skipped with the reason, so ``pytest -rs`` shows what did not run and why.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import zlib
from pathlib import Path
from typing import Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# The package is used from the source tree (no install step), like the library from build/.
sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import reference`


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs torch, a CUDA SM90 (Hopper) device and libfp8attn.so")


def _gpu_skip_reason() -> Optional[str]:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        return f"needs an SM90 (Hopper) GPU, found sm_{major}{minor}"
    import fp8attn

    try:
        fp8attn.get_lib()
    except fp8attn.LibraryNotFoundError as err:
        return str(err)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = _gpu_skip_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


@pytest.fixture(autouse=True)
def _seed(request: pytest.FixtureRequest) -> int:
    """Seeds every random source per test from its id: fresh data for each test and parameter set, and
    the same data when a failing test is rerun alone."""
    seed = zlib.crc32(request.node.nodeid.encode())
    random.seed(seed)
    if importlib.util.find_spec("numpy") is not None:
        import numpy as np

        np.random.seed(seed)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    return seed
