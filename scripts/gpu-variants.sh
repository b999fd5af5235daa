#!/usr/bin/env bash
#===- scripts/gpu-variants.sh - One plan's profile under PTX variants -----===#
#
# On the GPU machine: runs `k3-run --profile` on PLAN over WEIGHTS once with
# the built-in PTX and once per variant folder (made by scripts/ptx-variant.sh,
# loaded through K3C_PTX_DIR), and prints one line per run: the step with
# graph replay and the µs per launch of each KERNEL named (comma-separated
# plan kernel names, e.g. kda_decode,mla_attend). Each run's whole profile
# goes to $OUT/variant-<name>.txt (else /tmp/gpu-variants).
#
#   scripts/gpu-variants.sh STAGE PLAN WEIGHTS KERNELS [VARIANT_DIR...]
#   e.g. scripts/gpu-variants.sh build/gpu-stage \
#          build/gpu-stage/plans/kimi-linear-48b-e32-default.plan synthetic:1 \
#          kda_decode build/gpu-stage/variants/kda-vec-only
#
#===----------------------------------------------------------------------===#
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '3,15p' "$0" >&2
  exit 2
fi
STAGE=$1 PLAN=$2 WEIGHTS=$3 KERNELS=$4
shift 4
OUTDIR=${OUT:-/tmp/gpu-variants}
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64
status=0
printf '%-24s %12s' variant "graph us"
IFS=, read -r -a names <<<"$KERNELS"
for k in "${names[@]}"; do printf ' %14s' "$k"; done
printf '\n'
for dir in builtin "$@"; do
  name=$(basename "$dir")
  log="$OUTDIR/variant-$name.txt"
  if [ "$dir" = builtin ]; then
    env -u K3C_PTX_DIR "$STAGE"/bin/k3-run "$PLAN" --weights "$WEIGHTS" \
      --prompt-ids "$(seq -s, 1 64)" --max-new 8 --backend cuda --profile \
      >/dev/null 2>"$log" || status=1
  else
    K3C_PTX_DIR=$dir "$STAGE"/bin/k3-run "$PLAN" --weights "$WEIGHTS" \
      --prompt-ids "$(seq -s, 1 64)" --max-new 8 --backend cuda --profile \
      >/dev/null 2>"$log" || status=1
  fi
  graph=$(grep -o 'graph replay [0-9.]* us' "$log" | grep -o '[0-9.]*' | tail -1)
  printf '%-24s %12s' "$name" "${graph:-?}"
  for k in "${names[@]}"; do
    # The kernel table's row: name launches us/step us/launch ...
    us=$(awk -v k="$k" '$1 == k && NF >= 8 { print $4; exit }' "$log")
    printf ' %14s' "${us:-?}"
  done
  printf '\n'
done
exit $status
