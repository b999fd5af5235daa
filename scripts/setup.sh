#!/usr/bin/env bash
#===- scripts/setup.sh - Install build dependencies and configure ---------===#
#
# Idempotent: installs the Debian packages that are missing (MLIR 22, LLVM
# tools for lit/FileCheck, GoogleTest, nlohmann-json, CLI11, Ninja, CMake) and
# configures ./build. Set K3C_COMPILER=OFF to configure the runtime-only build
# (no MLIR needed), as on the GPU machine.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
K3C_COMPILER=${K3C_COMPILER:-ON}

packages=(cmake ninja-build g++ nlohmann-json3-dev libgtest-dev libcli11-dev)
if [ "$K3C_COMPILER" = ON ]; then
  packages+=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools)
fi

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cuda=OFF
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] && cuda=AUTO
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DK3C_ENABLE_COMPILER="$K3C_COMPILER" -DK3C_ENABLE_CUDA="$cuda" >/dev/null
fi
echo "setup: configured $BUILD_DIR (compiler side: $K3C_COMPILER)"
