//===- ModelMaker.h - Synthetic checkpoints from a config -------*- C++ -*-===//
//
// Writes a model directory (config.json + safetensors, Hugging Face names and
// layouts) filled with deterministic pseudo-random weights, scaled so that
// activations keep realistic magnitudes through every layer and routing and
// logits vary between tokens, with clear margins. Tests, benchmarks and the compiler's
// end-to-end checks run on these instead of the real multi-hundred-GB
// checkpoints.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODELMAKER_H
#define K3C_RUNTIME_MODELMAKER_H

#include "runtime/Config.h"
#include "runtime/Status.h"

#include <cstdint>
#include <functional>
#include <string>

namespace k3 {

/// Called after each tensor is written with the bytes written so far and the
/// total the model will take.
using ProgressFn = std::function<void(uint64_t bytesDone, uint64_t bytesTotal)>;

/// Writes `config` with weights drawn from `seed` into `dir` (created if
/// needed): config.json plus model.safetensors, or, when shardBytes > 0,
/// shards of at most shardBytes each (a single tensor larger than that gets
/// a shard of its own) named model-0000i-of-0000n.safetensors, with
/// model.safetensors.index.json. Routed experts are MXFP4 when
/// config.expertsMxfp4. The same config and seed give byte-identical files;
/// each tensor's values depend only on the seed, the tensor's name and the
/// config's sizes. The models are confident by construction (a planted
/// routing code, bigram and AttnRes marker; see ModelMaker.cpp), so greedy
/// decoding does not sit on near-ties that rounding could flip.
/// Tensors are generated and written one at a time, so memory stays at about
/// one tensor (the largest is usually the embedding or lm_head).
///
/// `structure` Random leaves the plant out (plain random weights of the same
/// scales): chaotic at bf16 for free-running greedy decodes, which is why
/// the checks on such models are teacher-forced.
enum class Structure { Planted, Random };
Status makeModel(const ModelConfig &config, uint64_t seed,
                 const std::string &dir, ProgressFn progress = {},
                 int64_t shardBytes = 0,
                 Structure structure = Structure::Planted);

} // namespace k3

#endif // K3C_RUNTIME_MODELMAKER_H
