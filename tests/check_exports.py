#!/usr/bin/env python3
"""Fail unless a libfp8attn.so exports exactly its public API (ctest: cpu.install.Exports).

The public API is every function declared with FP8ATTN_API in the public headers (include/fp8attn/*.h):
C functions (c_api.h, extern "C") are exported under their own name, C++ functions under a name mangled
in namespace fp8attn (_ZN7fp8attn<len><name>E...). `nm -D --defined-only LIB` lists the library's
exported symbols; any symbol that is neither fails the check (a leaked internal, an inline std:: function,
the static CUDA runtime), and so does any declared function that is not exported.

Usage: check_exports.py [--nm NM] --include-dir include/fp8attn LIB
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# FP8ATTN_API <return type> <name>(   -- the name is the last identifier before the parenthesis.
_DECLARATION = re.compile(r"\bFP8ATTN_API\b[^;(]*?\b(\w+)\s*\(")
_CXX_NAME = re.compile(r"^_ZN7fp8attn(\d+)(\w+)")


def declared_functions(include_dir: Path) -> set[str]:
    names: set[str] = set()
    for header in sorted(include_dir.glob("*.h")):
        text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"#define[^\n]*", "", text)  # the macro's own definition
        names.update(_DECLARATION.findall(text))
    return names


def exported_symbols(nm: str, lib: str) -> list[str]:
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    # "<address> <type> <name>"; the name may carry a version suffix (@@...).
    return [line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()]


def public_name(symbol: str, declared: set[str]) -> str | None:
    """The declared function a symbol exports, or None."""
    if symbol in declared:
        return symbol
    match = _CXX_NAME.match(symbol)
    if match:
        length, rest = int(match.group(1)), match.group(2)
        name = rest[:length]
        if len(name) == length and name in declared:
            return name
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lib")
    ap.add_argument("--include-dir", required=True, type=Path, help="the public headers (include/fp8attn)")
    ap.add_argument("--nm", default="nm")
    args = ap.parse_args()

    declared = declared_functions(args.include_dir)
    if not declared:
        print(f"check_exports: FAILED: no FP8ATTN_API declaration in {args.include_dir}/*.h", file=sys.stderr)
        return 1
    symbols = exported_symbols(args.nm, args.lib)
    unexpected = [s for s in symbols if public_name(s, declared) is None]
    missing = sorted(declared - {public_name(s, declared) for s in symbols})
    print(f"check_exports: {args.lib}: {len(symbols)} exported symbols, {len(declared)} declared functions")
    for symbol in sorted(symbols):
        print(f"  {symbol}")
    if unexpected:
        print(f"check_exports: FAILED: {len(unexpected)} exported symbols are not declared FP8ATTN_API in "
              f"{args.include_dir}:", file=sys.stderr)
        for symbol in sorted(unexpected):
            print(f"  {symbol}", file=sys.stderr)
    if missing:
        print(f"check_exports: FAILED: declared FP8ATTN_API but not exported: {', '.join(missing)}",
              file=sys.stderr)
    return 1 if unexpected or missing else 0


if __name__ == "__main__":
    sys.exit(main())
