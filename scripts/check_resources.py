#!/usr/bin/env python3
"""Fail if any GPU function in a library has a stack frame or uses local memory (spills).

Runs `cuobjdump --dump-resource-usage LIB`, parses every function entry

    Function _ZN7fp8attn...:
     REG:168 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0

and exits 1, listing the offenders, if any has STACK != 0 or LOCAL != 0 (ptxas reports register spills
as stack-frame bytes). It also exits 1 when it finds no function at all: a check that cannot fail is no
check. On success it prints "checked N kernels: 0 spills, 0 stack frames" and a table (kernel, REG, SHARED).

cuobjdump is looked up in this order (find_cuda_tool): --cuobjdump PATH (when it exists), $FP8ATTN_CUOBJDUMP,
`cuobjdump` on PATH, $CUDA_HOME/bin, an installed nvidia-cuda-cuobjdump wheel (nvidia/cu13/bin), the project's
.deps/. If none is found, the pinned wheel is installed into .deps/ with pip (as cmake/cutlass.cmake does for the
CUTLASS headers), unless --no-install is given. `--find cuobjdump` (or `--find nvdisasm`, which
check_sass.py needs) only prints the path it would use.

Usage: check_resources.py [--cuobjdump PATH] [--filter REGEX] [--no-install] LIB [LIB...]
       check_resources.py --find cuobjdump|nvdisasm [--no-install]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# CUDA binary tools as pinned pip wheels: the oldest CUDA 13 releases on PyPI; they read cubins of nvcc 13.0 and later.
TOOL_WHEELS = {"cuobjdump": ("nvidia-cuda-cuobjdump", "13.2.51"), "nvdisasm": ("nvidia-cuda-nvdisasm", "13.2.51")}
REPO_ROOT = Path(__file__).resolve().parent.parent

_FUNC_RE = re.compile(r"^\s*Function\s+(\S+?):\s*(.*)$")
_FIELD_RE = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def _executable(p: Path | str | None) -> str | None:
    if not p:
        return None
    p = Path(p)
    if p.is_file() and os.access(p, os.X_OK):
        return str(p)
    return None


def find_cuda_tool(tool: str, hint: str | None, allow_install: bool) -> str:
    """Path of a CUDA binary tool (cuobjdump, nvdisasm): hint, $FP8ATTN_<TOOL>, PATH, $CUDA_HOME/bin,
    /usr/local/cuda/bin, an installed wheel, the project's .deps/; else its pinned wheel pip-installed into
    .deps/<tool>-<version> (unless allow_install is false)."""
    wheel, version = TOOL_WHEELS[tool]
    target = REPO_ROOT / ".deps" / f"{tool}-{version}"  # where the wheel is pip-installed

    def wheel_bin(root: Path) -> Path:  # the tool inside an installed wheel's tree
        return root / "nvidia" / "cu13" / "bin" / tool

    candidates: list[Path | str | None] = [hint, os.environ.get(f"FP8ATTN_{tool.upper()}"), shutil.which(tool)]
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / tool)
    candidates.append(f"/usr/local/cuda/bin/{tool}")
    for entry in sys.path:
        if entry:
            candidates.append(wheel_bin(Path(entry)))
    candidates.append(wheel_bin(target))
    for c in candidates:
        found = _executable(c)
        if found:
            return found
    if not allow_install:
        sys.exit(f"{tool} not found (not given, not in $FP8ATTN_{tool.upper()}, PATH, CUDA_HOME or {target}); "
                 f"install it with: python3 -m pip install {wheel}=={version}")
    print(f"{tool} not found; installing {wheel}=={version} into {target}", file=sys.stderr)
    rc = subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                          "--disable-pip-version-check", "--target", str(target), f"{wheel}=={version}"],
                         env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})
    found = _executable(wheel_bin(target))
    if rc != 0 or not found:
        sys.exit(f"could not install {wheel}=={version} (pip exit {rc}); put a CUDA toolkit's {tool} on PATH or "
                 f"set FP8ATTN_{tool.upper()}")
    return found


def parse_resource_usage(text: str) -> list[dict]:
    """Function entries of cuobjdump's resource report; the fields may follow on the same or the next line."""
    funcs: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            current = {"name": m.group(1), "fields": {}}
            funcs.append(current)
            line = m.group(2)
        elif current is None or not line.strip() or not line.startswith((" ", "\t")):
            current = None
            continue
        if current is not None:
            for key, value in _FIELD_RE.findall(line):
                current["fields"][key] = int(value)
    return funcs


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}
    if len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


def _collapse_templates(s: str, max_depth: int) -> str:
    """Replaces template arguments nested deeper than max_depth with '…'."""
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == max_depth + 1:
                out.append("<…")
            if depth > max_depth:
                continue
        elif ch == ">":
            depth -= 1
            if depth >= max_depth:
                if depth == max_depth:
                    out.append(">")
                continue
        elif depth > max_depth:
            continue
        out.append(ch)
    return "".join(out)


def short_name(demangled: str, width: int) -> str:
    """The kernel's name without return type and parameters, with as much template nesting as fits width."""
    s = demangled
    if s.startswith("void "):
        s = s[5:]
    # Parameter list: the first "(" outside template brackets.
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            s = s[:i]
            break
    if len(s) > width:  # namespaces go first: cutlass::device_kernel<fp8attn::X<..>> -> device_kernel<X<..>>
        s = re.sub(r"\b(?:[A-Za-z_]\w*::)+", "", s)
    for max_depth in range(12, 0, -1):
        t = _collapse_templates(s, max_depth)
        if len(t) <= width:
            return t
    t = _collapse_templates(s, 1)
    return t if len(t) <= width else t[: width - 1] + "…"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("libs", nargs="*", help="shared libraries / executables / cubins to check")
    ap.add_argument("--cuobjdump", help="path to cuobjdump (used when it exists)")
    ap.add_argument("--filter", default=None,
                    help="only check functions whose mangled or demangled name matches this regex")
    ap.add_argument("--no-install", action="store_true", help="never pip-install cuobjdump")
    ap.add_argument("--find", choices=sorted(TOOL_WHEELS), help="print the path of this tool (found or installed) and exit")
    ap.add_argument("--width", type=int, default=110, help="kernel column width of the table")
    args = ap.parse_args()

    if args.find:
        print(find_cuda_tool(args.find, args.cuobjdump if args.find == "cuobjdump" else None,
                             allow_install=not args.no_install))
        return 0
    cuobjdump = find_cuda_tool("cuobjdump", args.cuobjdump, allow_install=not args.no_install)
    if not args.libs:
        ap.error("no library given")

    funcs: list[dict] = []
    for lib in args.libs:
        if not Path(lib).is_file():
            print(f"check_resources: FAILED: {lib} does not exist", file=sys.stderr)
            return 1
        proc = subprocess.run([cuobjdump, "--dump-resource-usage", lib], capture_output=True, text=True)
        if proc.returncode != 0:
            # cuobjdump exits non-zero on a file with no device code; that is zero kernels, reported below.
            print(f"check_resources: cuobjdump exit {proc.returncode} on {lib}: "
                  f"{(proc.stderr or proc.stdout).strip()}", file=sys.stderr)
        for f in parse_resource_usage(proc.stdout):
            f["lib"] = lib
            funcs.append(f)

    # The same function can appear in several cubins (one per translation unit); keep each distinct entry once.
    seen, unique = set(), []
    for f in funcs:
        key = (f["name"], tuple(sorted(f["fields"].items())))
        if key not in seen:
            seen.add(key)
            unique.append(f)
    names = demangle(sorted({f["name"] for f in unique}))
    for f in unique:
        f["demangled"] = names.get(f["name"], f["name"])
    if args.filter:
        rx = re.compile(args.filter)
        unique = [f for f in unique if rx.search(f["name"]) or rx.search(f["demangled"])]

    libs = ", ".join(args.libs)
    if not unique:
        print(f"check_resources: FAILED: found no GPU function in {libs}"
              + (f" matching /{args.filter}/" if args.filter else "")
              + " (cuobjdump reported none): nothing could be checked", file=sys.stderr)
        return 1

    missing = [f for f in unique if "STACK" not in f["fields"] or "LOCAL" not in f["fields"]]
    if missing:
        print("check_resources: FAILED: cuobjdump's report lacks STACK/LOCAL for: "
              + ", ".join(f["name"] for f in missing), file=sys.stderr)
        return 1

    stack = [f for f in unique if f["fields"]["STACK"] != 0]
    local = [f for f in unique if f["fields"]["LOCAL"] != 0]
    n = len(unique)
    if stack or local:
        print(f"check_resources: FAILED: of {n} kernels in {libs}, {len(stack)} have a stack frame and "
              f"{len(local)} use local memory:", file=sys.stderr)
        offenders = [f for f in unique if f["fields"]["STACK"] != 0 or f["fields"]["LOCAL"] != 0]
        for f in sorted(offenders, key=lambda x: x["demangled"]):
            fl = f["fields"]
            print(f"  STACK:{fl['STACK']:<6} LOCAL:{fl['LOCAL']:<6} REG:{fl.get('REG', '?'):<4} "
                  f"{f['demangled']}", file=sys.stderr)
        print("check_resources: a stack frame or local memory means spilled registers (ptxas counts spills as "
              "stack) or an array indexed at run time; `ptxas -v` shows the function's spill bytes", file=sys.stderr)
        return 1

    print(f"check_resources: checked {n} kernels: 0 spills, 0 stack frames ({libs})")
    rows = sorted(((short_name(f["demangled"], max(20, args.width)), f["fields"]) for f in unique),
                  key=lambda row: row[0])
    width = max(len("kernel"), max(len(name) for name, _ in rows))
    print(f"  {'kernel':<{width}} {'REG':>4} {'SHARED':>7}")
    for name, fl in rows:
        print(f"  {name:<{width}} {fl.get('REG', 0):>4} {fl.get('SHARED', 0):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
