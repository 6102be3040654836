#!/usr/bin/env python3
"""Instruction counts of a kernel's loops, from its SASS, without a GPU.

A loop is the span from a backward branch's target to the branch. The smallest loops of more than
MIN instructions are printed first (a kernel's step loop is usually among them), each with its
opcode histogram. Usage:

    eval "$(bash scripts/ci_nvrtc_env.sh)"
    cargo run --release -p chorus-cuda --example dump_cubin -- /tmp/k.cubin
    cuobjdump -sass -fun lm_paged_attention_mma8 /tmp/k.cubin > /tmp/k.sass
    python3 scripts/sass_loops.py /tmp/k.sass [COUNT] [MIN]

(cuobjdump from the `nvidia-cuda-cuobjdump` pip wheel.)
"""
import collections
import re
import sys

LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH = re.compile(r"BRA.*?0x([0-9a-f]+)")


def opcode(text, full):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op if full else op.split(".")[0]


def main():
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    least = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in map(LINE.match, open(path)) if m]
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    loops = []
    for i, (addr, text) in enumerate(ins):
        m = BRANCH.search(text)
        if m:
            target = int(m.group(1), 16)
            if target < addr and target in index and i - index[target] > least:
                loops.append((index[target], i))
    loops.sort(key=lambda span: span[1] - span[0])
    for start, end in loops[:count]:
        ops = collections.Counter(opcode(t, False) for _, t in ins[start : end + 1])
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(14))
        print(f"loop {ins[start][0]:#x}-{ins[end][0]:#x}: {end - start + 1} instructions: {top}")


if __name__ == "__main__":
    main()
