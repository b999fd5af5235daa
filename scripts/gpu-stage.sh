#!/usr/bin/env bash
#===- scripts/gpu-stage.sh - Gather what a GPU run needs into one folder ---===#
#
# The GPU machine has no MLIR and no internet, so the binaries are built here
# (with nvcc: the PTX is embedded) and carried there: this copies the CUDA
# tests, the compiled-plan GPU test, the benchmark and the tools into
# build/gpu-stage, plus plans for the tiny presets. Then, on the GPU machine:
#   scripts/gpu-check.sh build/gpu-stage
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STAGE=$BUILD_DIR/gpu-stage
ninja -C "$BUILD_DIR" >/dev/null
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/plans"
cp "$BUILD_DIR"/test/unit/bin/cuda_test "$STAGE/bin/"
cp "$BUILD_DIR"/bin/kernel_bench "$BUILD_DIR"/bin/k3-run "$BUILD_DIR"/bin/k3-mkmodel "$STAGE/bin/"
for preset in tiny tiny-linear; do
  for fusion in none default max; do
    "$BUILD_DIR"/bin/k3c "preset:$preset" --fusion=$fusion --max-seq 512 \
      -o "$STAGE/plans/$preset-$fusion.plan"
  done
done
du -sh "$STAGE"
