#===- scripts/cuda-tools.sh - nvcc, ptxas and the build's PTX flags -------===#
#
# Sourced by the scripts that build a kernel family's PTX as the build does
# (ptx-variant.sh, sass.sh): sets `nvcc` (K3C_NVCC, else the build's, else
# PATH's), `ptxas` (beside nvcc, else PATH's) and `flags` (the file of the
# build's nvcc flags), or exits naming what is missing. Run from the
# repository root.
#
#===----------------------------------------------------------------------===#
flags=build/ptx/nvcc-flags
[ -f "$flags" ] || { echo "$(basename "$0"): no $flags (configure and build with CUDA first)" >&2; exit 1; }
nvcc=${K3C_NVCC:-$(grep -s '^K3C_NVCC:' build/CMakeCache.txt | cut -d= -f2 || true)}
nvcc=${nvcc:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || { echo "$(basename "$0"): no nvcc (set K3C_NVCC)" >&2; exit 1; }
ptxas=$(dirname "$nvcc")/ptxas
[ -x "$ptxas" ] || ptxas=$(command -v ptxas || true)
[ -n "$ptxas" ] || { echo "$(basename "$0"): no ptxas beside $nvcc or on PATH" >&2; exit 1; }
