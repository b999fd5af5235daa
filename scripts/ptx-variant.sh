#!/usr/bin/env bash
#===- scripts/ptx-variant.sh - A kernel family's PTX built with other knobs --===#
#
# Builds kernels/<family>/*.cu to PTX as the build does (its nvcc flags, read
# from build/ptx/nvcc-flags), with extra nvcc flags (the K3C_TUNE_* knobs of a family, or
# -DK3C_KERNEL_TRACE), into DIR/<family>.ptx, and runs ptxas on it so register
# spills show. On the GPU machine, K3C_PTX_DIR=DIR makes every k3 binary load
# that family from DIR instead of its built-in (or the plan's) PTX:
# variants are measured with the same binaries and plans.
#
#   scripts/ptx-variant.sh DIR FAMILY [NVCC_FLAGS...]
#   e.g. scripts/ptx-variant.sh build/gpu-stage/variants/ahead2k moe \
#          -DK3C_TUNE_MOE_AHEAD_BF16=2048
#        K3C_PTX_DIR=build/gpu-stage/variants/ahead2k kernel_bench --only moe
#
# SRC=FILE builds that file instead of the family's .cu (e.g. an older
# version from git show, to measure a change against its parent).
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '3,18p' "$0" >&2
  exit 2
fi
dir=$1 family=$2
shift 2
. scripts/cuda-tools.sh
src=${SRC:-$(ls kernels/"$family"/*.cu)}
mkdir -p "$dir"
# shellcheck disable=SC2046
"$nvcc" $(cat "$flags") -I. "$@" "$src" -o "$dir/$family.ptx"
"$ptxas" -arch=sm_90 -warn-spills -warn-lmem-usage "$dir/$family.ptx" \
  -o "$dir/$family.cubin"
rm -f "$dir/$family.cubin"
echo "$dir/$family.ptx ($*)"
