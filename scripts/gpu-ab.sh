#!/usr/bin/env bash
#===- scripts/gpu-ab.sh - A kernel change against a variant, alternated --===#
#
# On the GPU machine: times the stage's built-in kernels ("new") against a
# PTX variant folder of the same stage ("old": K3C_PTX_DIR, e.g. the parent
# commit's family made here with
#   SRC=<(git show HEAD^:kernels/moe/Moe.cu) \
#     scripts/ptx-variant.sh build/gpu-stage-variants/prev moe
# and carried by scripts/gpu-stage.sh), alternating new and old ROUNDS
# times so that clock and thermal drift fall on both: kernel_bench cases
# matching ONLY, and with MODEL and PLAN the whole decode step
# (decode_bench, synthetic weights, context 1024, graph replay). Same
# binaries, same plan, same process kind: only the PTX differs. Prints the
# lines of each run that carry the numbers; docs/PERF.md records them.
#
#   scripts/gpu-ab.sh STAGE VARIANT ONLY [MODEL PLAN] [ROUNDS]
#   e.g. scripts/gpu-ab.sh /tmp/s/gpu-stage prev moe \
#          k3-4l-e32 /tmp/s/gpu-stage/plans/k3-4l-e32-default.plan 2
#
#===----------------------------------------------------------------------===#
set -uo pipefail
if [ $# -lt 3 ]; then
  sed -n '3,19p' "$0" >&2
  exit 2
fi
STAGE=$1 VARIANT=$2 ONLY=$3
MODEL=${4:-} PLAN=${5:-} ROUNDS=${6:-2}
B=$STAGE/bin
V=$STAGE/variants/$VARIANT
[ -d "$V" ] || { echo "gpu-ab.sh: no variant folder $V" >&2; exit 1; }
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
# side NAME [ENV...]: one kernel_bench (and decode_bench) run of a side.
side() {
  local name=$1
  shift
  echo "== $name"
  env "$@" "$B"/kernel_bench --only "$ONLY" 2>&1 |
    grep -vE '^(case|K3C_PTX_DIR)' || status=1
  if [ -n "$MODEL" ]; then
    env "$@" "$B"/decode_bench --weights synthetic:1 --model "$MODEL" \
      --plan "$name=$PLAN" --backend cuda --context 1024 2>&1 |
      grep -E "^copy|^$MODEL .* graph " || status=1
  fi
}
for ((i = 1; i <= ROUNDS; ++i)); do
  side new
  side old K3C_PTX_DIR="$V"
done
exit $status
