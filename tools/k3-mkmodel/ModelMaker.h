//===- ModelMaker.h - Synthetic checkpoints from a config -------*- C++ -*-===//
//
// Writes a model directory (config.json + safetensors, Hugging Face names and
// layouts) filled with deterministic pseudo-random weights, scaled so that
// activations keep realistic magnitudes through every layer and routing and
// logits vary between tokens, with clear margins. Tests, benchmarks and the
// compiler's end-to-end checks run on these instead of the real
// multi-hundred-GB checkpoints.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TOOLS_K3_MKMODEL_MODELMAKER_H
#define K3C_TOOLS_K3_MKMODEL_MODELMAKER_H

#include "runtime/Status.h"
#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Synthetic.h"

#include <cstdint>
#include <functional>
#include <string>

namespace k3 {

/// Called after each piece of the model (a run of a tensor's values, or a
/// whole MXFP4 expert matrix) is handed to its file (small pieces through an
/// 8 MiB buffer), on the thread that called makeModel, with the bytes
/// written so far and the total the model will take: `bytesDone` never
/// decreases and the last call has bytesDone == bytesTotal.
using ProgressFn = std::function<void(uint64_t bytesDone, uint64_t bytesTotal)>;

/// Writes `config` with weights drawn from `seed` into `dir` (created if
/// needed): config.json plus model.safetensors, or, when shardBytes > 0,
/// shards of at most shardBytes each (a single tensor larger than that gets
/// a shard of its own) named model-0000i-of-0000n.safetensors, with
/// model.safetensors.index.json. Routed experts are MXFP4 when
/// config.expertsMxfp4. The same config and seed give byte-identical files;
/// each tensor's values depend only on the seed, the tensor's name and the
/// config's sizes. The models are confident by construction (a planted
/// routing code, bigram and AttnRes marker; see runtime/model/Synthetic.cpp),
/// so greedy decoding does not sit on near-ties that rounding could flip.
///
/// `threads` (0 or less: defaultMakerThreads(); at most kMaxMakerThreads)
/// threads generate the values: every tensor is cut into pieces of at most
/// 2^21 values (an MXFP4 expert matrix is one piece), each drawn from the
/// tensor's stream moved on to the piece's first value, so the bytes are
/// the same for any thread count. The
/// calling thread writes the pieces in file order with large sequential
/// writes; at most threads + 2 pieces (a few MiB each) are in memory at a
/// time, whatever the size of the model. With threads = 1 everything runs
/// on the calling thread.
///
/// `structure` Random leaves the plant out (Synthetic.h).
///
/// `dtypes` picks how the tensors stored either way by real checkpoints are
/// written (ModelWeights.h): Published stores K3's conv filters and o_norm
/// F32 (unrounded values; Simple rounds the same values to BF16) and
/// Kimi-Linear's router bias BF16.
Status makeModel(const ModelConfig &config, uint64_t seed,
                 const std::string &dir, ProgressFn progress = {},
                 int64_t shardBytes = 0,
                 Structure structure = Structure::Planted, int threads = 0,
                 StoredDtypes dtypes = StoredDtypes::Simple);

} // namespace k3

#endif // K3C_TOOLS_K3_MKMODEL_MODELMAKER_H
