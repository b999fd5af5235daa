//===- MmaTileParams.h - The tensor-core tile's shape -------------*- C++
//-*-===//
//
// Host-visible constants of kernels/common/MmaTile.cuh: the launches that use
// the tile take kMmaTileThreads threads and kMmaTileSmemBytes of dynamic
// shared memory, and their grids count tiles of kMmaTileRows weight rows by
// kMmaTileTokens tokens (the narrow tile: kMmaNarrowTokens tokens,
// kMmaNarrowSmemBytes).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_MMATILEPARAMS_H
#define K3C_KERNELS_COMMON_MMATILEPARAMS_H

#include "kernels/common/HostDevice.h"

#include <cstdint>

namespace k3 {

constexpr int kMmaTileRows = 64;
constexpr int kMmaTileTokens = 64;
constexpr int kMmaTileK = 64;
constexpr int kMmaTileStages = 4;
constexpr int kMmaTileThreads = 128;
/// The narrow tile's tokens: steps of few tokens (a decode batch's MoE,
/// where an expert serves a few rows) stage a quarter of the tokens' room.
constexpr int kMmaNarrowTokens = 16;
/// Dynamic shared memory of a tile of `tokens` tokens (bytes): the stages'
/// token and weight tiles.
K3C_HOST_DEVICE constexpr int64_t mmaTileSmemBytes(int tokens) {
  return int64_t{kMmaTileStages} * (tokens + kMmaTileRows) * kMmaTileK * 2;
}
constexpr int64_t kMmaTileSmemBytes = mmaTileSmemBytes(kMmaTileTokens);
constexpr int64_t kMmaNarrowSmemBytes = mmaTileSmemBytes(kMmaNarrowTokens);

} // namespace k3

#endif // K3C_KERNELS_COMMON_MMATILEPARAMS_H
