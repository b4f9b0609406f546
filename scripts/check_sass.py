#!/usr/bin/env python3
"""The SASS of a library's GPU functions, on any machine (no GPU needed): opcode counts, required opcodes, and
which functions differ between two builds.

Runs `cuobjdump --dump-sass LIB` (cuobjdump calls nvdisasm; both are found or pip-installed into .deps/ by
check_resources.find_cuda_tool) and counts, per function, each instruction's opcode without its modifiers
(`QGMMA.64x128x32.F32.E4M3.E4M3` counts as QGMMA; a predicate guard is skipped).

    check_sass.py LIB [--filter REGEX] [--require QGMMA ...] [--show MUFU FFMA ...]   (LIB first: the lists are open)
    check_sass.py LIB --against OTHER_LIB [--filter REGEX]

--require exits 1 if any selected function lacks one of the opcodes (the build checks that every forward
kernel runs its GEMMs on FP8 WGMMA: --filter fwd_kernel --require QGMMA), or if no function is selected: a
check that cannot fail is no check. --against prints, per function of either library, whether its
instructions are identical (addresses aside) and otherwise the opcodes whose counts differ: the way to show
that a change touched only the kernels it meant to.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_resources import demangle, find_cuda_tool, short_name  # noqa: E402

_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "        /*01a0*/                   @!P0 QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24 ;   /* 0x... */"
_INSTRUCTION_RE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+((?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)[^;]*;)")

DEFAULT_SHOW = ["QGMMA", "MUFU", "FFMA", "FMNMX", "FADD", "F2FP", "PRMT", "LDSM", "STSM", "STL", "LDL"]


# An anonymous namespace's mangled name carries a hash of the file's build path (_GLOBAL__N__859655b8_...), so the
# same kernel built in two trees would not pair up; the hash is zeroed (same length: the mangled length stays).
_ANONYMOUS_HASH_RE = re.compile(r"(_GLOBAL__N__)([0-9a-f]+)(_)")


def parse_sass(text: str) -> dict[str, list[tuple[str, str]]]:
    """Function (mangled name, anonymous-namespace hash zeroed) -> its instructions as (opcode, instruction text
    without address or encoding)."""
    functions: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        m = _FUNCTION_RE.match(line)
        if m:
            name = _ANONYMOUS_HASH_RE.sub(lambda h: h[1] + "0" * len(h[2]) + h[3], m.group(1))
            current = functions.setdefault(name, [])
            continue
        m = _INSTRUCTION_RE.match(line)
        if m and current is not None:
            current.append((m.group(2), " ".join(m.group(1).split())))
    return functions


def label(demangled: str, width: int) -> str:
    """A short name: a forward kernel by its traits (d, dv, block_m, block_n, two-level), anything else by
    check_resources.short_name."""
    traits = re.search(r"KernelTraits<([^<>]*)>", demangled)
    if traits:
        return f"fwd_kernel<{traits.group(1).replace('(int)', '').replace('(bool)', '')}>"
    return short_name(demangled.replace("(anonymous namespace)::", ""), width)


def dump_sass(lib: str, cuobjdump: str, nvdisasm: str) -> dict[str, list[tuple[str, str]]]:
    env = {**os.environ, "PATH": f"{Path(nvdisasm).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([cuobjdump, "--dump-sass", lib], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"check_sass: cuobjdump --dump-sass {lib} failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_sass(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lib", help="shared library, executable or cubin")
    ap.add_argument("--filter", help="only functions whose mangled or demangled name matches this regex")
    ap.add_argument("--require", nargs="*", default=[], help="opcodes every selected function must contain")
    ap.add_argument("--show", nargs="*", default=DEFAULT_SHOW, help="opcodes to count in the table")
    ap.add_argument("--against", help="a second build: which functions differ, and by which opcode counts")
    ap.add_argument("--cuobjdump", help="path to cuobjdump (used when it exists)")
    ap.add_argument("--no-install", action="store_true", help="never pip-install cuobjdump or nvdisasm")
    ap.add_argument("--width", type=int, default=70, help="function column width")
    args = ap.parse_args()

    cuobjdump = find_cuda_tool("cuobjdump", args.cuobjdump, allow_install=not args.no_install)
    nvdisasm = find_cuda_tool("nvdisasm", None, allow_install=not args.no_install)
    libs = [args.lib] + ([args.against] if args.against else [])
    for lib in libs:
        if not Path(lib).is_file():
            print(f"check_sass: FAILED: {lib} does not exist", file=sys.stderr)
            return 1
    sass = [dump_sass(lib, cuobjdump, nvdisasm) for lib in libs]
    names = demangle(sorted(set().union(*sass)))
    rx = re.compile(args.filter) if args.filter else None
    selected = sorted(n for n in set().union(*sass) if rx is None or rx.search(n) or rx.search(names[n]))
    if not selected:
        print(f"check_sass: FAILED: no GPU function in {', '.join(libs)}"
              + (f" matches /{args.filter}/" if args.filter else ""), file=sys.stderr)
        return 1
    labels = {n: label(names[n], args.width) for n in selected}
    width = max(len("function"), *(len(v) for v in labels.values()))

    if args.against:
        print(f"check_sass: {args.lib} against {args.against}")
        for n in selected:
            a, b = sass[0].get(n), sass[1].get(n)
            if a is None or b is None:
                verdict = f"only in {args.lib if b is None else args.against}"
            elif [text for _, text in a] == [text for _, text in b]:
                verdict = "identical"
            else:
                ca, cb = collections.Counter(op for op, _ in a), collections.Counter(op for op, _ in b)
                delta = {op: ca[op] - cb[op] for op in set(ca) | set(cb) if ca[op] != cb[op]}
                verdict = f"differs: {len(a)} vs {len(b)} instructions" + "".join(
                    f", {op} {delta[op]:+d}" for op in sorted(delta, key=lambda op: -abs(delta[op]))[:8])
            print(f"  {labels[n]:<{width}}  {verdict}")
        return 0

    counts = {n: collections.Counter(op for op, _ in sass[0][n]) for n in selected}
    print(f"check_sass: {len(selected)} functions in {args.lib}")
    print(f"  {'function':<{width}} {'instr':>6}" + "".join(f" {op:>6}" for op in args.show))
    for n in selected:
        print(f"  {labels[n]:<{width}} {len(sass[0][n]):>6}" + "".join(f" {counts[n][op]:>6}" for op in args.show))
    missing = [(n, op) for n in selected for op in args.require if counts[n][op] == 0]
    for n, op in missing:
        print(f"check_sass: FAILED: {labels[n]} has no {op}", file=sys.stderr)
    if missing:
        return 1
    if args.require:
        print(f"check_sass: every selected function contains {', '.join(args.require)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
