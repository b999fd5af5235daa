#!/usr/bin/env bash
#===- scripts/gpu-perf.sh - Whole-step measurements at real model size -----===#
#
# On the GPU machine, from a folder made by scripts/gpu-stage.sh: makes the
# Kimi-Linear-48B geometry there (27 layers; 32 routed experts read the same
# bytes per token as 256 at batch 1) unless it exists, decodes it with each
# fusion strategy's plan (decode_bench: CUDA graph replay and kernel by
# kernel, with and without programmatic dependent launch), profiles the
# default strategy with k3-run --profile and one strategy kernel by kernel
# with Nsight Compute. Results go to $OUT (else /tmp/gpu-perf): benchmark
# tables and JSON, the profile, the ncu CSV and its summary.
#
# --full: also the full geometry (256 experts, 92 GiB) over synthetic weights
# made in memory (--weights synthetic:1; the machine's 64 GB disk cannot
# hold the files): decode_bench of the three strategies and the default
# strategy's profile.
#
# --batch16: issue 12's batch target instead of all the above: kernel_bench
# of both tensor-core projection forms at 16 rows, then steps of 16
# sequences of the full geometry (plans/kimi-linear-48b-default-b16.plan,
# synthetic weights) in decode_bench --batch 16 with the chunk form and its
# per-kernel profile: with every form, with the optional forms off
# (K3C_FORMS_OFF, RowsForms.h kCudaOptionalForms), without the narrow
# projections, without the MoE chunk's narrow tiles, and with the MoE
# chunk's earlier serial plan and route; the greedy ids with the optional
# forms on and off; then the stand-in's 1024-token prefill with either
# MoE plan kernel. K3C_B16_MORE=1 adds the rows form, the tensor-core
# projections' split at 2 and 3 blocks per SM (K3C_MMA_BLOCKS_PER_SM), the
# MoE chunk's plan and route each alone.
#
#   scripts/gpu-perf.sh [STAGE_DIR] [--no-ncu] [--full] [--batch16]
#
#===----------------------------------------------------------------------===#
set -uo pipefail
STAGE=${1:-build/gpu-stage}
NCU=1
FULL=0
BATCH16=0
for a in "${@:2}"; do
  [ "$a" = "--no-ncu" ] && NCU=0
  [ "$a" = "--full" ] && FULL=1
  [ "$a" = "--batch16" ] && BATCH16=1
done
OUTDIR=${OUT:-/tmp/gpu-perf}
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64

if [ $BATCH16 = 1 ]; then
  status=0
  plan="$STAGE/plans/kimi-linear-48b-default-b16.plan"
  [ -f "$plan" ] || { echo "no $plan (scripts/gpu-stage.sh makes it)"; exit 1; }
  mkdir -p "$OUTDIR/results"
  # b16 FORM TAG [ENV...]: steps of 16 rows at context 128 (16 prompts of
  # 64 tokens, then greedy), the floor each weight once and the experts'
  # expected union.
  b16() {
    local form=$1 tag=$2
    shift 2
    env "$@" "$STAGE"/bin/decode_bench --weights synthetic:1 \
      --model kimi-linear-48b-e256 --plan "$plan" --backend cuda --batch 16 \
      --context 128 --prompt-len 64 --steps 10 --warmup 2 \
      --prefill-form "$form" --profile \
      --json "$OUTDIR/results/b16-$tag.json" >"$OUTDIR/b16-$tag.txt" 2>&1 ||
      status=1
    echo "== $tag ($form${*:+, $*})"
    grep -E "us per step|^(moe_ffn|linear|linear_multi|kda_decode|mla_[a-z_]*|argmax|embed|gated_act|total) " \
      "$OUTDIR/b16-$tag.txt"
  }
  # Each run binds the 92 GiB of synthetic weights again (~4 s drawn on
  # the device).
  # The projections' tensor-core forms alone, at a batch of 16 (the wide
  # tile and the narrow form; kernel_bench launches both directly).
  "$STAGE"/bin/kernel_bench --only linear_rows_mma \
    --json "$OUTDIR/results/kernel-linear-rows-mma.json" \
    >"$OUTDIR/kernel-linear-rows-mma.txt" 2>&1 || status=1
  echo "== kernel_bench --only linear_rows_mma"
  cat "$OUTDIR/kernel-linear-rows-mma.txt"
  b16 chunk chunk
  b16 chunk forms-off K3C_FORMS_OFF=all
  b16 chunk forms-on K3C_FORMS_ON=all
  b16 chunk no-narrow K3C_FORMS_OFF=linear_rows_mma16,linear_multi_rows_mma16
  b16 chunk no-moe-narrow K3C_FORMS_OFF=moe_chunk_gate_up_narrow,moe_chunk_down_narrow
  b16 chunk moe-serial K3C_MOE_CHUNK_PLAN=serial K3C_MOE_CHUNK_ROUTE_GROUPS=1
  if [ "${K3C_B16_MORE:-0}" = 1 ]; then
    b16 rows rows
    b16 chunk split2 K3C_MMA_BLOCKS_PER_SM=2
    b16 chunk split3 K3C_MMA_BLOCKS_PER_SM=3
    b16 chunk moe-route1 K3C_MOE_CHUNK_ROUTE_GROUPS=1
    b16 chunk moe-plan-serial K3C_MOE_CHUNK_PLAN=serial
  fi
  # The same 16 prompts greedy with and without the optional forms (the
  # MLA batch form and the MMA projections are within rounding of the rows
  # forms: tokens may part at a near-tie, not at the start).
  prompts=$(mktemp)
  python3 -c 'import random; random.seed(3); print("\n".join(" ".join(str(random.randrange(1000, 100000)) for _ in range(64)) for _ in range(16)))' >"$prompts"
  for v in 0 1; do
    off=$([ $v = 0 ] && echo all)
    K3C_FORMS_OFF=$off "$STAGE"/bin/k3-run "$plan" --weights synthetic:1 \
      --backend cuda --prompts "$prompts" --batch 16 --max-new 32 \
      >"$OUTDIR/b16-ids-$v.txt" 2>"$OUTDIR/b16-ids-$v.err" || status=1
  done
  python3 - "$OUTDIR/b16-ids-0.txt" "$OUTDIR/b16-ids-1.txt" <<'PY'
import sys
a, b = (open(f).read().split("\n") for f in sys.argv[1:3])
same = [next((i for i, (x, y) in enumerate(zip(p.split(), q.split())) if x != y),
             len(p.split())) for p, q in zip(a, b) if p]
print("== optional forms on and off: the same first ids of 32 per sequence:", same)
PY
  # A 1024-token prompt of the 32-expert stand-in (the sessions' prompt:
  # random.seed(1), ids in [1000, 100000)) in chunks of 256, with and
  # without the MoE chunk's parallel plan: k3-run's prefill time and ids.
  standin="$STAGE/plans/kimi-linear-48b-e32-default.plan"
  if [ -f "$standin" ]; then
    ids=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(1000, 100000)) for _ in range(1024)))')
    for variant in serial parallel; do
      K3C_MOE_CHUNK_PLAN=$variant "$STAGE"/bin/k3-run "$standin" \
        --weights synthetic:1 --backend cuda --prompt-ids "$ids" --max-new 8 \
        --prefill-chunk 256 >"$OUTDIR/prefill-$variant.txt" 2>&1 || status=1
      echo "== prefill, plan $variant: $(grep -o 'prefill 1024[^;]*' "$OUTDIR/prefill-$variant.txt")"
      grep -v '^k3-run' "$OUTDIR/prefill-$variant.txt" | head -1
    done
  fi
  exit $status
fi
MODELS=${K3C_MODELS:-/tmp/k3-models}
KL=$MODELS/kimi-linear-48b-e32
status=0

if [ ! -f "$KL/config.json" ] || [ ! -f "$KL/model.safetensors.index.json" ]; then
  t0=$(date +%s)
  "$STAGE"/bin/k3-mkmodel kimi-linear-48b --experts 32 --shard-mb 4096 \
    -o "$KL" >"$OUTDIR/mkmodel.log" 2>&1 || { echo "k3-mkmodel failed"; tail -3 "$OUTDIR/mkmodel.log"; exit 1; }
  echo "made $KL in $(( $(date +%s) - t0 )) s ($(du -sh "$KL" | cut -f1))"
fi

mkdir -p "$OUTDIR/results"
# bench MODEL WEIGHTS NAME TAG [ENV...]: whole steps of each strategy's plan
# (plans/MODEL-<fusion>.plan) at context 1024 (decode_bench: copy bandwidth
# measured in the same process, median of 50 steps, JSON rows named NAME)
# into bench-TAG.txt.
bench() {
  local model=$1 weights=$2 name=$3 tag=$4 fusion plan
  shift 4
  local plans=()
  for fusion in none default max; do
    plan="$STAGE/plans/$model-$fusion.plan"
    [ -f "$plan" ] && plans+=(--plan "$fusion=$plan")
  done
  env "$@" "$STAGE"/bin/decode_bench --weights "$weights" \
    --model "$name" "${plans[@]}" --backend cuda --context 1024 \
    --out-dir "$OUTDIR/results" 2>&1 | tee "$OUTDIR/bench-$tag.txt" ||
    status=1
}
# profile MODEL WEIGHTS TAG: the project's own per-kernel profile of the
# default strategy into profile-TAG.txt.
profile() {
  "$STAGE"/bin/k3-run "$STAGE/plans/$1-default.plan" --weights "$2" \
    --prompt-ids "$(seq -s, 1 64)" --max-new 8 --backend cuda --profile \
    >/dev/null 2>"$OUTDIR/profile-$3.txt" || status=1
  tail -45 "$OUTDIR/profile-$3.txt"
}

# With programmatic dependent launch (the default) and without (K3C_PDL=0).
bench kimi-linear-48b-e32 "$KL" kimi-linear-48b-e32 pdl
bench kimi-linear-48b-e32 "$KL" kimi-linear-48b-e32-nopdl nopdl K3C_PDL=0
profile kimi-linear-48b-e32 "$KL" default

if [ $NCU = 1 ] && command -v ncu >/dev/null; then
  plan="$STAGE/plans/kimi-linear-48b-e32-${K3C_NCU_FUSION:-max}.plan"
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
if [ $FULL = 1 ]; then
  # The full geometry's weights made in memory (--weights synthetic:1, the
  # bytes k3-mkmodel --real-dtypes --seed 1 writes): no files, each weight
  # copied to the GPU as soon as it is made.
  bench kimi-linear-48b synthetic:1 kimi-linear-48b full
  profile kimi-linear-48b synthetic:1 full
fi
exit $status
