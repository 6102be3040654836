#!/usr/bin/env python3
"""Executed instructions, stall samples and L2 sectors of one kernel by SASS opcode, from the source
page of an Nsight Compute report (`ncu -i REPORT --page source --csv --print-source sass >
SOURCE.csv`, as scripts/device/ncu_attention.sh writes it). Usage:

    python3 scripts/ncu_opcodes.py SOURCE.csv [TOP]
"""
import collections
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    # Row 0 names the kernel; row 1 holds the column names.
    head, data = rows[1], rows[2:]
    col = {name: head.index(name) for name in head}
    src, ins = col["Source"], col["Instructions Executed"]
    stall = col["Warp Stall Sampling (All Samples)"]
    sectors = col.get("L2 Theoretical Sectors Global")
    excess = col.get("L2 Theoretical Sectors Global Excessive")
    sums = collections.defaultdict(lambda: [0, 0, 0, 0])
    for r in data:
        if len(r) <= ins or not r[ins].isdigit() or not r[src].split():
            continue
        words = r[src].split()
        op = words[1] if words[0].startswith("@") else words[0]
        s = sums[op]
        s[0] += int(r[ins])
        s[1] += int(r[stall]) if r[stall].isdigit() else 0
        if sectors is not None and r[sectors].isdigit():
            s[2] += int(r[sectors])
            s[3] += int(r[excess]) if r[excess].isdigit() else 0
    total = sum(s[0] for s in sums.values()) or 1
    samples = sum(s[1] for s in sums.values()) or 1
    print(f"{rows[0][1] if len(rows[0]) > 1 else '?'}: {total} instructions, {samples} stall samples")
    print(f"{'opcode':42s} {'instr %':>8s} {'stalls %':>9s} {'L2 sectors':>12s} {'excessive':>12s}")
    for op, s in sorted(sums.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{op:42s} {100 * s[0] / total:8.2f} {100 * s[1] / samples:9.2f} {s[2]:12,d} {s[3]:12,d}")


if __name__ == "__main__":
    main()
