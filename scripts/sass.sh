#!/usr/bin/env bash
#===- scripts/sass.sh - A kernel's SASS and its instruction mix, here -----===#
#
# Builds kernels/<family>/*.cu to PTX with the build's nvcc flags, assembles
# it for sm_90 with ptxas (spills and registers shown), and disassembles one
# kernel with cuobjdump, so that a change's instruction count can be read
# before any GPU run (docs/PERF.md, thirty-first session: the SASS counted
# per stage of moe_experts_mxfp4). This machine's CUDA has no cuobjdump: set
# K3C_CUOBJDUMP (with nvdisasm on PATH), or the script fetches NVIDIA's
# cuobjdump and nvdisasm wheels from PyPI once into build/cuda-tools.
#
#   scripts/sass.sh FAMILY KERNEL [NVCC_FLAGS...]
#   e.g. scripts/sass.sh moe k3_moe_experts_mxfp4
#        SRC=old.cu scripts/sass.sh moe k3_moe_experts_mxfp4
#
# Writes build/sass/KERNEL.sass and prints ptxas's line for the kernel, the
# opcode histogram of the whole kernel and of its innermost loop holding an
# HMMA (without one, its largest loop).
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '3,18p' "$0" >&2
  exit 2
fi
family=$1 kernel=$2
shift 2
. scripts/cuda-tools.sh
cuobjdump=${K3C_CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
  cuobjdump=build/cuda-tools/nvidia/cu13/bin/cuobjdump
  if [ ! -x "$cuobjdump" ]; then
    echo "sass.sh: fetching cuobjdump and nvdisasm (pip download)" >&2
    tmp=$(mktemp -d)
    # (Pinned to CUDA 13: the wheels unpack under nvidia/cu13.)
    pip download --no-deps -q 'nvidia-cuda-cuobjdump==13.*' \
      'nvidia-cuda-nvdisasm==13.*' -d "$tmp" >&2 ||
      { echo "sass.sh: no cuobjdump; set K3C_CUOBJDUMP" >&2; exit 1; }
    mkdir -p build/cuda-tools
    for w in "$tmp"/*.whl; do
      python3 -m zipfile -e "$w" build/cuda-tools
    done
    chmod +x build/cuda-tools/nvidia/cu13/bin/*
    rm -rf "$tmp"
  fi
  # cuobjdump runs nvdisasm from beside it.
  export PATH=$PWD/build/cuda-tools/nvidia/cu13/bin:$PATH
fi
src=${SRC:-$(ls kernels/"$family"/*.cu)}
out=build/sass
mkdir -p "$out"
# shellcheck disable=SC2046
"$nvcc" $(cat "$flags") -I. "$@" "$src" -o "$out/$family.ptx"
"$ptxas" -arch=sm_90 -v -warn-spills "$out/$family.ptx" -o "$out/$family.cubin" \
  2>"$out/$family.ptxas" || { cat "$out/$family.ptxas" >&2; exit 1; }
grep -A3 "entry function '$kernel'" "$out/$family.ptxas" | tail -3 || true
"$cuobjdump" -sass -fun "$kernel" "$out/$family.cubin" >"$out/$kernel.sass" 2>/dev/null
grep -q '/\*[0-9a-f]\{4,\}\*/' "$out/$kernel.sass" ||
  { echo "sass.sh: no kernel $kernel in $src" >&2; exit 1; }
python3 - "$out/$kernel.sass" <<'EOF'
import collections, re, sys

# Each instruction line: /*ADDR*/  [@P] OPCODE operands ;
insts = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
    if m:
        text = re.sub(r'^@!?U?P\w+\s+', '', m.group(2).strip())
        insts.append((int(m.group(1), 16), text.split()[0], text))

def histogram(rows, title):
    counts = collections.Counter(op for _, op, _ in rows)
    print(f"{title}: {len(rows)} instructions")
    for op, n in counts.most_common(14):
        print(f"  {n:6d}  {op}")

histogram(insts, "whole kernel")
# Loops: a branch to a lower address; the body is [target, branch].
loops = []
for i, (addr, op, text) in enumerate(insts):
    # BRA, BRA.U, BRA.DIV ...: the target is the last 0x operand.
    m = re.search(r'0x([0-9a-f]+)\s*$', text)
    if op.startswith('BRA') and m and int(m.group(1), 16) < addr:
        body = [r for r in insts if int(m.group(1), 16) <= r[0] <= addr]
        loops.append((sum(r[1].startswith('HMMA') for r in body), -len(body),
                      body))
if loops:
    # The innermost loop doing tensor-core work: the smallest body holding
    # an HMMA; without any, the largest loop.
    mma = [l for l in loops if l[0] > 0]
    best = max(mma, key=lambda l: l[1]) if mma else min(loops, key=lambda l: l[1])
    histogram(best[2], f"loop at 0x{best[2][0][0]:x}-0x{best[2][-1][0]:x}")
EOF
