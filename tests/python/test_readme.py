"""The README's examples run, and its environment-variable table is complete.

- The Python example (the README's ```python block) runs in a fresh interpreter against the source checkout;
  it needs torch, so it is skipped, with the reason, where torch is not installed.
- The C++ example (the ```cpp block) is tests/consumer/main.cpp, which ctest cpu.install.Consumer builds
  against the installed package and runs: here the two are held equal.
- Every environment variable the project reads (getenv / os.environ in the code, `${NAME:-default}` in the
  scripts, `env = "NAME"` in pyproject.toml, `$ENV{NAME}` in cmake/) is named in the README's table.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = (REPO_ROOT / "README.md").read_text()

# Variables of the shell and of Python itself that the scripts pass through rather than define.
_STANDARD_VARIABLES = {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH"}


def _code_blocks(language: str) -> list[str]:
    return re.findall(r"^```" + language + r"\n(.*?)^```", README, flags=re.S | re.M)


def test_cpp_example_is_the_consumer_project() -> None:
    blocks = _code_blocks("cpp")
    assert len(blocks) == 1, f"expected one ```cpp block in README.md, found {len(blocks)}"
    assert blocks[0] == (REPO_ROOT / "tests" / "consumer" / "main.cpp").read_text(), (
        "README.md's C++ example differs from tests/consumer/main.cpp (the program the tests build and run): "
        "copy the file into the README")


def test_python_example_runs() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the README's Python example needs torch, which is not installed")
    blocks = _code_blocks("python")
    assert len(blocks) == 1, f"expected one ```python block in README.md, found {len(blocks)}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", blocks[0]], cwd=REPO_ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"README's Python example failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.startswith("fp8attn "), result.stdout


def _variables_read() -> dict[str, str]:
    """Every environment variable the project reads -> one file that reads it."""
    found: dict[str, str] = {}
    patterns = {
        ".py": [r"os\.environ\.get\(\s*\"([A-Z0-9_]+)\"", r"os\.environ\[\s*\"([A-Z0-9_]+)\"\s*\]",
                r"getenv\(\s*\"([A-Z0-9_]+)\"", r"_ENV_[A-Z_]*\s*=\s*\"([A-Z0-9_]+)\""],  # _ENV_LIB = "..."
        ".cpp": [r"getenv\(\s*\"([A-Z0-9_]+)\"", r"env_flag\(\s*\"([A-Z0-9_]+)\"",
                 r"env_u64\(\s*\"([A-Z0-9_]+)\""],
        ".h": [r"getenv\(\s*\"([A-Z0-9_]+)\""],
        ".cu": [r"getenv\(\s*\"([A-Z0-9_]+)\""],
        ".cuh": [r"getenv\(\s*\"([A-Z0-9_]+)\""],
        ".sh": [r"\$\{([A-Z][A-Z0-9_]*)(?::-|-|:\+|:=)"],
        ".toml": [r"env\s*=\s*\"([A-Z0-9_]+)\""],
        ".cmake": [r"\$ENV\{([A-Z0-9_]+)\}"],
    }
    roots = ["python", "src", "include", "scripts", "bench", "tests/gpu", "tests/cpu", "tests/consumer", ".ci",
             "cmake"]
    files = [REPO_ROOT / "pyproject.toml"] + [p for root in roots for p in sorted((REPO_ROOT / root).rglob("*"))]
    for path in files:
        suffix = ".sh" if path.name == "run" and path.parent.name == ".ci" else path.suffix
        if not path.is_file() or suffix not in patterns:
            continue
        text = path.read_text(errors="replace")
        for pattern in patterns[suffix]:
            for name in re.findall(pattern, text):
                found.setdefault(name, str(path.relative_to(REPO_ROOT)))
    # check_resources.py reads the CUDA_* variables through a loop over their names.
    if "CUDA_HOME" in (REPO_ROOT / "scripts" / "check_resources.py").read_text():
        found.setdefault("CUDA_HOME", "scripts/check_resources.py")
    return {name: where for name, where in found.items() if name not in _STANDARD_VARIABLES}


def test_environment_table_names_every_variable_read() -> None:
    table = README.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    read = _variables_read()
    # the scan finds them (C++, Python, scripts, CMake)
    assert {"FP8ATTN_LIB", "FP8ATTN_HEAD_DIMS", "FP8ATTN_REQUIRE_GPU", "FP8ATTN_CHECK_DEVICE_ARGS",
            "FP8ATTN_FUZZ_COUNT", "FP8ATTN_TORCH_PYTHON"} <= read.keys()
    missing = {name: where for name, where in read.items() if name not in documented}
    assert not missing, f"environment variables read but not in README.md's table: {missing}"
