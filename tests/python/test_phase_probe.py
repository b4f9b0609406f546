"""The phase probe's two halves agree (no GPU, no torch): bench/phase_probe.py names the columns of the marks buffer
that src/sm90/phase_probe.cuh's kernels fill, so its MARKS must be PhaseMark's names in PhaseMark's order."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kernel_marks() -> list[str]:
    """PhaseMark's enumerators, kPhaseFirstKvIssued -> first_kv_issued, up to (not including) kPhaseMarks."""
    header = (ROOT / "src" / "sm90" / "phase_probe.cuh").read_text()
    enum = header[header.index("enum PhaseMark"):]
    names = re.findall(r"^\s*kPhase(\w+)", enum[:enum.index("};")], flags=re.M)
    assert names[-1] == "Marks", "kPhaseMarks (the count) ends the enum"
    return [re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() for name in names[:-1]]


def script_marks() -> list[str]:
    tree = ast.parse((ROOT / "bench" / "phase_probe.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MARKS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("bench/phase_probe.py has no MARKS")


def test_the_script_names_the_kernels_marks_in_order() -> None:
    assert script_marks() == kernel_marks()


def test_the_conversion_marks_exist() -> None:
    # cta_microseconds turns cycles into microseconds through these four.
    assert {"entry", "end", "entry_ns", "end_ns"} <= set(kernel_marks())
