//===- MmaTileParams.h - The tensor-core tile's shape -------------*- C++
//-*-===//
//
// Host-visible constants of kernels/common/MmaTile.cuh: the launches that use
// the tile take kMmaTileThreads threads and kMmaTileSmemBytes of dynamic
// shared memory, and their grids count tiles of kMmaTileRows weight rows by
// kMmaTileTokens tokens.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_MMATILEPARAMS_H
#define K3C_KERNELS_COMMON_MMATILEPARAMS_H

#include <cstdint>

namespace k3 {

constexpr int kMmaTileRows = 64;
constexpr int kMmaTileTokens = 64;
constexpr int kMmaTileK = 64;
constexpr int kMmaTileStages = 4;
constexpr int kMmaTileThreads = 128;
/// Dynamic shared memory of a tile (bytes): the stages' token and weight
/// tiles.
constexpr int64_t kMmaTileSmemBytes =
    int64_t{kMmaTileStages} * (kMmaTileTokens + kMmaTileRows) * kMmaTileK * 2;

} // namespace k3

#endif // K3C_KERNELS_COMMON_MMATILEPARAMS_H
