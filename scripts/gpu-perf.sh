#!/usr/bin/env bash
#===- scripts/gpu-perf.sh - Whole-step measurements at real model size -----===#
#
# On the GPU machine, from a folder made by scripts/gpu-stage.sh: makes the
# Kimi-Linear-48B geometry there (27 layers; 32 routed experts read the same
# bytes per token as 256 at batch 1) unless it exists, decodes it with each
# fusion strategy's plan (CUDA graph replay and kernel by kernel), and
# profiles one strategy kernel by kernel with Nsight Compute. Results go to
# $OUT (else /tmp/gpu-perf): k3-run logs, the ncu CSV and its summary.
#
#   scripts/gpu-perf.sh [STAGE_DIR] [--no-ncu]
#
#===----------------------------------------------------------------------===#
set -uo pipefail
STAGE=${1:-build/gpu-stage}
NCU=1
for a in "${@:2}"; do
  [ "$a" = "--no-ncu" ] && NCU=0
done
OUTDIR=${OUT:-/tmp/gpu-perf}
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64
MODELS=${K3C_MODELS:-/tmp/k3-models}
KL=$MODELS/kimi-linear-48b-e32
status=0

if [ ! -f "$KL/config.json" ] || [ ! -f "$KL/model.safetensors.index.json" ]; then
  t0=$(date +%s)
  "$STAGE"/bin/k3-mkmodel kimi-linear-48b --experts 32 --shard-mb 4096 \
    -o "$KL" >"$OUTDIR/mkmodel.log" 2>&1 || { echo "k3-mkmodel failed"; tail -3 "$OUTDIR/mkmodel.log"; exit 1; }
  echo "made $KL in $(( $(date +%s) - t0 )) s ($(du -sh "$KL" | cut -f1))"
fi

# A 1024-token prompt is fed one token per step today; the timing line
# reports decode tokens/s separately.
prompt=$(seq -s, 1 1024)
for fusion in none default max; do
  plan="$STAGE/plans/kimi-linear-48b-e32-$fusion.plan"
  [ -f "$plan" ] || continue
  for graph in "" --no-cuda-graph; do
    "$STAGE"/bin/k3-run "$plan" --weights "$KL" --prompt-ids "$prompt" \
      --max-new 128 --backend cuda $graph --quiet \
      >/dev/null 2>"$OUTDIR/run-$fusion${graph:+-nograph}.log"
    rc=$?
    [ $rc -ne 0 ] && status=1
    printf '%-8s %-16s %s\n' "$fusion" "${graph:-graph}" \
      "$(tail -1 "$OUTDIR/run-$fusion${graph:+-nograph}.log")"
  done
done

if [ $NCU = 1 ] && command -v ncu >/dev/null; then
  plan="$STAGE/plans/kimi-linear-48b-e32-${K3C_NCU_FUSION:-default}.plan"
  # Kernel by kernel (no graph); skip the launches of the first 8 steps.
  launches=$(grep -o '"kernel":' "$plan" | wc -l)
  ncu --clock-control none --launch-skip $((8 * launches)) \
    --launch-count "$launches" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --page raw "$STAGE"/bin/k3-run "$plan" --weights "$KL" \
    --prompt-ids 1,2,3,4,5,6,7,8 --max-new 4 --backend cuda --no-cuda-graph \
    --quiet >"$OUTDIR/ncu.csv" 2>"$OUTDIR/ncu.log" || status=1
  if [ -f "$STAGE/ncu-summary.py" ]; then
    python3 "$STAGE/ncu-summary.py" "$OUTDIR/ncu.csv" | tee "$OUTDIR/ncu-summary.txt"
  fi
fi
exit $status
