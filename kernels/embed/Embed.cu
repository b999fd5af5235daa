//===- Embed.cu - Embedding lookup (CUDA) ---------------------------------===//
//
// k3_embed: out[i] = table[token, i], an exact bf16 copy (EmbedParams).
// Grid: any; threads stride over dim. A token outside [0, vocab) writes
// zeros, as the CPU kernel does (the runtime refuses such tokens earlier).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/embed/EmbedParams.h"

using namespace k3;

namespace {

__device__ __forceinline__ void embedRow(const EmbedParams &p) {
  // The step block, when bound, was written by the previous step's argmax:
  // read through L2.
  const int64_t token = p.step ? __ldcg(p.step + kStepToken) : p.token;
  const bool valid = token >= 0 && token < p.vocab;
  const uint16_t *row = p.table + (valid ? token : 0) * p.dim;
  for (int64_t i = dev::globalThread(); i < p.dim; i += dev::gridThreads())
    p.out[i] = valid ? row[i] : uint16_t(0);
}

} // namespace

extern "C" __global__ void k3_embed(const EmbedParams p) {
  dev::enterStep();
  embedRow(p);
}

/// k3_embed_rows: k3_embed for several rows (EmbedRowsParams), block (x, y)
/// block x of row y's launch.
extern "C" __global__ void k3_embed_rows(const EmbedRowsParams rp) {
  __shared__ __align__(16) dev::RowParams<EmbedParams> row;
  dev::loadRowParams(rp.rows, row);
  dev::enterStep();
  embedRow(row.get());
}
