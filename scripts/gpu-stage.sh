#!/usr/bin/env bash
#===- scripts/gpu-stage.sh - Gather what a GPU run needs into one folder ---===#
#
# The GPU machine has no MLIR and no internet, so the binaries are built here
# (with nvcc: the PTX is embedded) and carried there: this copies the CUDA
# tests, the compiled-plan GPU test, the benchmarks and the tools into
# build/gpu-stage (and build/gpu-stage.tgz), plus plans for the tiny presets.
# Then, on the GPU machine:
#   scripts/gpu-check.sh build/gpu-stage
#
# --small: only the plans gpu-check.sh, cuda_test and the headline
# benchmarks read (the tiny presets, the stand-in and full Kimi-Linear-48B
# default plans, the K3 slices), so that the .tgz fits a device call's
# carry limit (64 MiB) with room for variants.
#
# --launch-trace: also every kernel family built with -DK3C_LAUNCH_TRACE into
# variants/launch-trace (decode_bench --timeline with K3C_PTX_DIR there).
# Folders under build/gpu-stage-variants (made with ptx-variant.sh) are
# always copied into variants/.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STAGE=$BUILD_DIR/gpu-stage
LAUNCH_TRACE=0
SMALL=0
for a in "$@"; do
  case $a in
  --launch-trace) LAUNCH_TRACE=1 ;;
  --small) SMALL=1 ;;
  *) echo "gpu-stage.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
ninja -C "$BUILD_DIR" >/dev/null
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/plans"
cp "$BUILD_DIR"/test/unit/bin/cuda_test "$STAGE/bin/"
cp "$BUILD_DIR"/bin/kernel_bench "$BUILD_DIR"/bin/decode_bench "$BUILD_DIR"/bin/k3-run \
  "$BUILD_DIR"/bin/k3-mkmodel "$STAGE/bin/"
for preset in tiny tiny-linear tiny-odd; do
  for fusion in none default max; do
    "$BUILD_DIR"/bin/k3c "preset:$preset" --fusion=$fusion --max-seq 512 \
      -o "$STAGE/plans/$preset-$fusion.plan"
  done
done
# Tensor-parallel plans (k3c --tp 2) for cuda_test's two ranks on one GPU.
for preset in tiny tiny-linear; do
  for r in 0 1; do
    "$BUILD_DIR"/bin/k3c "preset:$preset" --fusion=default --max-seq 512 \
      --tp 2 --rank $r -o "$STAGE/plans/$preset-default-tp2-r$r.plan"
  done
done
# Batched plans (k3c --max-batch 4) for cuda_test's batch test.
for preset in tiny tiny-linear tiny-odd; do
  "$BUILD_DIR"/bin/k3c "preset:$preset" --fusion=default --max-seq 512 \
    --max-batch 4 -o "$STAGE/plans/$preset-default-b4.plan"
done
# Real-size plans for scripts/gpu-perf.sh: Kimi-Linear-48B geometry with 32
# experts and with all 256 (the models themselves are made on the GPU
# machine).
cfg=$(mktemp -d)
"$BUILD_DIR"/bin/k3-mkmodel kimi-linear-48b --experts 32 --config-only \
  -o "$cfg/kl" >/dev/null
for fusion in none default max; do
  "$BUILD_DIR"/bin/k3c "$cfg/kl" --fusion=$fusion --max-seq 2048 \
    -o "$STAGE/plans/kimi-linear-48b-e32-$fusion.plan"
  # The full geometry (256 experts), for scripts/gpu-perf.sh --full.
  "$BUILD_DIR"/bin/k3c preset:kimi-linear-48b --fusion=$fusion --max-seq 2048 \
    -o "$STAGE/plans/kimi-linear-48b-$fusion.plan"
done
# The default strategy with the L2 prefetches of k3-prefetch-weights (off by
# default: slower on the H200, docs/PERF.md), to measure them again.
"$BUILD_DIR"/bin/k3c "$cfg/kl" --fusion=default --max-seq 2048 \
  --l2-prefetch=kda_decode,mla_attend,mla_attend_clustered \
  -o "$STAGE/plans/kimi-linear-48b-e32-default-prefetch.plan"
# The default strategy with mla_attend on one block per SM instead of a
# cluster per head (k3c --mla-clusters=false), to compare.
"$BUILD_DIR"/bin/k3c "$cfg/kl" --fusion=default --max-seq 2048 \
  --mla-clusters=false -o "$STAGE/plans/kimi-linear-48b-e32-default-nomlacl.plan"
# K3's 4-layer slice with 32 MXFP4 experts (the issue's K3 measurement) and
# the stand-in planned for 32K tokens (the long-context measurement).
"$BUILD_DIR"/bin/k3-mkmodel k3 --layers 4 --experts 32 --config-only \
  -o "$cfg/k3l4" >/dev/null
"$BUILD_DIR"/bin/k3c "$cfg/k3l4" --fusion=default --max-seq 2048 \
  -o "$STAGE/plans/k3-4l-e32-default.plan"
# The same with AttnRes on one block and the MXFP4 experts on the CUDA cores
# (k3c --attn-res-clusters=false --moe-mxfp4-mma=false: the default before
# the thirtieth session, docs/PERF.md), to compare.
"$BUILD_DIR"/bin/k3c "$cfg/k3l4" --fusion=default --max-seq 2048 \
  --attn-res-clusters=false --moe-mxfp4-mma=false \
  -o "$STAGE/plans/k3-4l-e32-default-cudacores.plan"
"$BUILD_DIR"/bin/k3c "$cfg/kl" --fusion=default --max-seq 32800 \
  -o "$STAGE/plans/kimi-linear-48b-e32-default-32k.plan"
# The stand-in with 16 slots (batch decode, k3-run --prompts --batch 16).
"$BUILD_DIR"/bin/k3c "$cfg/kl" --fusion=default --max-seq 2048 \
  --max-batch 16 -o "$STAGE/plans/kimi-linear-48b-e32-default-b16.plan"
# The full geometry's layers with 128 experts and 16 slots (~50 GB of
# weights: the batch-16 measurement on an 80 GB H100, where the 256 experts'
# 92 GiB do not fit; ~82 of 128 experts in the union of 16 rows' picks).
"$BUILD_DIR"/bin/k3-mkmodel kimi-linear-48b --experts 128 --config-only \
  -o "$cfg/kl128" >/dev/null
"$BUILD_DIR"/bin/k3c "$cfg/kl128" --fusion=default --max-seq 2048 \
  --max-batch 16 -o "$STAGE/plans/kimi-linear-48b-e128-default-b16.plan"
# The full geometry with 16 slots: issue 12's batch-16 measurement (the union
# of the 16 rows' experts out of 256).
"$BUILD_DIR"/bin/k3c preset:kimi-linear-48b --fusion=default --max-seq 2048 \
  --max-batch 16 -o "$STAGE/plans/kimi-linear-48b-default-b16.plan"
# A real-geometry slice small enough for the CPU backend (Kimi-Linear-48B,
# 4 layers, 8 experts: its KDA heads take kda_decode's clustered path, which
# no tiny preset does) for gpu-check.sh's --check-against cpu; planned for
# 8192 tokens, so its MLA layer is the mla_attend_clustered / mla_attend
# pair split at 4096 rows (the clustered one attends the check's contexts).
"$BUILD_DIR"/bin/k3-mkmodel kimi-linear-48b --layers 4 --experts 8 \
  --config-only -o "$cfg/kl4" >/dev/null
"$BUILD_DIR"/bin/k3c "$cfg/kl4" --fusion=default --max-seq 8192 \
  -o "$STAGE/plans/kimi-linear-48b-l4-e8-default.plan"
# K3's 4-layer slice with 8 experts, for the same check: AttnRes at K3's
# width (attn_res_clustered on a cluster of 8), the latent MoE's MXFP4
# experts (moe_experts_mxfp4) and K3's 96-head MLA at their real shapes.
"$BUILD_DIR"/bin/k3-mkmodel k3 --layers 4 --experts 8 --config-only \
  -o "$cfg/k3l4e8" >/dev/null
"$BUILD_DIR"/bin/k3c "$cfg/k3l4e8" --fusion=default --max-seq 512 \
  -o "$STAGE/plans/k3-l4-e8-default.plan"
rm -rf "$cfg"
if [ $LAUNCH_TRACE = 1 ]; then
  for cu in kernels/*/*.cu; do
    scripts/ptx-variant.sh "$STAGE/variants/launch-trace" \
      "$(basename "$(dirname "$cu")")" -DK3C_LAUNCH_TRACE >/dev/null 2>&1 ||
      { echo "gpu-stage.sh: the launch-trace build of $cu failed" >&2; exit 1; }
  done
fi
# PTX variants made with ptx-variant.sh (e.g. a kernel's parent commit, to
# measure a change against it with the same binaries: K3C_PTX_DIR).
if [ -d "$BUILD_DIR/gpu-stage-variants" ]; then
  mkdir -p "$STAGE/variants"
  cp -r "$BUILD_DIR"/gpu-stage-variants/. "$STAGE/variants/"
fi
if [ $SMALL = 1 ]; then
  # The strategies' comparison plans and the 32K / prefetch / batch-16 /
  # unclustered-MLA variants (scripts/gpu-perf.sh's) stay out.
  rm -f "$STAGE"/plans/*-32k.plan "$STAGE"/plans/*-prefetch.plan \
    "$STAGE"/plans/*-b16.plan "$STAGE"/plans/*-nomlacl.plan \
    "$STAGE"/plans/kimi-linear-48b-{none,max}.plan \
    "$STAGE"/plans/kimi-linear-48b-e32-{none,max}.plan
fi
shared=$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/ncu-summary.py
[ -f "$shared" ] && cp "$shared" "$STAGE/"
du -sh "$STAGE"
# The plans embed their PTX (a few MB each): carried compressed, the stage is
# a ~13 MB file; on the GPU machine: tar xzf build/gpu-stage.tgz -C build
tar czf "$BUILD_DIR/gpu-stage.tgz" -C "$BUILD_DIR" gpu-stage
du -sh "$BUILD_DIR/gpu-stage.tgz"
