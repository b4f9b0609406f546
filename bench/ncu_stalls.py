"""Summarise an ncu source-page CSV: where a kernel's warps wait, per SASS instruction.

    ncu --section SourceCounters --page source --print-source sass --csv ... > k.csv
    python bench/ncu_stalls.py k.csv [--top 30]

Prints the stall reasons over all samples, the instructions with the most samples (execution count, the
instruction before it: a wait names what it waits for) and, per instruction class (WGMMA waits, mbarrier waits,
MUFU, shared-memory ops, the rest), its share of the samples. Then the hot loop (the instructions with the
execution count, above a million, that holds the most samples, from the first to the last of them: in the
forward kernel the MMA warps' KV loop): its instructions per iteration per warp, by opcode, and its samples by class and reason.
Reads plain or gzipped CSV; one kernel per file.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re


def read_rows(path: str) -> tuple[str, list[dict[str, str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.startswith('"')]
    kernel = next((line for line in lines if line.startswith('"Kernel Name"')), "")
    body = [line for line in lines if not line.startswith('"Kernel Name"')]
    return kernel.split('","')[-1].strip().strip('",'), list(csv.DictReader(io.StringIO("".join(body))))


def opcode(sass: str) -> str:
    """The opcode with its modifiers ('QGMMA.64x128x32.F32...'), past a predicate; '' for an empty line."""
    fields = sass.split()
    return (fields[1] if fields[0].startswith("@") else fields[0]) if fields else ""


def add_reasons(reasons: collections.Counter, row: dict[str, str]) -> None:
    """Adds one instruction's stall samples by reason (all samples, not only the not-issued ones)."""
    for key, value in row.items():
        if key.startswith("stall_") and "Not Issued" not in key and value not in ("", "-"):
            reasons[key[len("stall_"):]] += int(value)


def instruction_class(sass: str, previous: str) -> str:
    op = opcode(sass)
    if op.startswith("WARPGROUP.DEPBAR"):
        return "wgmma wait"
    if op == "BRA" and "TRYWAIT" in previous:
        return "mbarrier wait"
    if op.startswith("QGMMA") or op.startswith("WARPGROUP"):
        return "wgmma issue"
    if op.startswith("MUFU"):
        return "mufu"
    if op.startswith(("LDSM", "STSM", "LDS", "STS")):
        return "shared ld/st"
    if op.startswith(("BAR", "SYNCS")):
        return "barrier"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    kernel, rows = read_rows(args.csv)
    samples = [int(r["Warp Stall Sampling (All Samples)"] or 0) for r in rows]
    total = sum(samples) or 1
    reasons = collections.Counter()
    for r in rows:
        add_reasons(reasons, r)
    print(f"{kernel[:110]}\n{len(rows)} SASS instructions, {total} samples")
    print("by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in reasons.most_common(12)))
    classes = collections.Counter()
    for i, r in enumerate(rows):
        classes[instruction_class(r["Source"].strip(), rows[i - 1]["Source"] if i else "")] += samples[i]
    print("by class:  " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in classes.most_common()))
    order = sorted(range(len(rows)), key=lambda i: -samples[i])[: args.top]
    executed = [int(r["Instructions Executed"] or 0) for r in rows]
    for i in order:
        sass = re.sub(r"\s+", " ", rows[i]["Source"].strip())
        prev = re.sub(r"\s+", " ", rows[i - 1]["Source"].strip()) if i else ""
        print(f"  {100 * samples[i] / total:5.1f}%  #{i:5d} exec {rows[i]['Instructions Executed']:>9s}  "
              f"{sass[:52]:52s} | prev: {prev[:60]}")

    samples_by_count = collections.Counter()
    for e, n in zip(executed, samples):
        if e > 1_000_000:
            samples_by_count[e] += n
    if not samples_by_count:
        return
    loop_count = samples_by_count.most_common(1)[0][0]
    hot = [i for i, e in enumerate(executed) if e == loop_count]
    lo, hi = hot[0], hot[-1]
    per_op, loop_classes, loop_reasons = collections.Counter(), collections.Counter(), collections.Counter()
    for i in range(lo, hi + 1):
        op = opcode(rows[i]["Source"])
        if not op:
            continue
        per_op[op.split(".")[0]] += executed[i] / loop_count
        loop_classes[instruction_class(rows[i]["Source"], rows[i - 1]["Source"])] += samples[i]
        add_reasons(loop_reasons, rows[i])
    loop_total = sum(loop_classes.values()) or 1
    print(f"hot loop #{lo}..#{hi} (executed {loop_count}x): {sum(per_op.values()):.0f} instructions per iteration "
          f"per warp, {100 * loop_total / total:.1f}% of the samples")
    print("  per iteration: " + ", ".join(f"{k} {v:.0f}" for k, v in per_op.most_common(24)))
    print("  by class:  " + ", ".join(f"{k} {100 * v / loop_total:.1f}%" for k, v in loop_classes.most_common()))
    print("  by reason: " + ", ".join(f"{k} {100 * v / loop_total:.1f}%" for k, v in loop_reasons.most_common(10)))


if __name__ == "__main__":
    main()
