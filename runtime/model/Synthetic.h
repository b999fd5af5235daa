//===- Synthetic.h - Deterministic synthetic weights ------------*- C++ -*-===//
//
// The weights k3-mkmodel writes and `--weights synthetic:SEED` makes in
// memory: every tensor of a config (Hugging Face names, layouts and dtypes),
// drawn from its own splitmix64 stream seeded from the model seed and the
// tensor's name, scaled so that activations keep realistic magnitudes, with
// structure planted so that greedy decoding has clear margins (Synthetic.cpp
// says how and why). A tensor's bytes depend only on the seed, its name and
// the config's sizes: not on the order tensors are made in, the thread
// count, sharding, or whether they go to a file or to memory.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODEL_SYNTHETIC_H
#define K3C_RUNTIME_MODEL_SYNTHETIC_H

#include "runtime/Status.h"
#include "runtime/io/Safetensors.h"
#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Tensors.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

/// Planted: the structure that makes greedy decodes confident. Random: the
/// same scales without it (chaotic at bf16 for free-running greedy decodes,
/// which is why the checks on such models are teacher-forced).
enum class Structure { Planted, Random };

/// One thread's scratch space for SyntheticWeights::generate*.
struct SyntheticScratch {
  std::vector<float> values;
  std::vector<uint8_t> packed, scale;
};

/// The synthetic weights of one config and seed.
class SyntheticWeights {
public:
  SyntheticWeights(const ModelConfig &config, uint64_t seed,
                   Structure structure, StoredDtypes dtypes);
  ~SyntheticWeights();
  SyntheticWeights(const SyntheticWeights &) = delete;
  SyntheticWeights &operator=(const SyntheticWeights &) = delete;

  /// Every tensor of the config (expectedTensorSpecs order) and its role.
  const std::vector<TensorSpec> &specs() const { return specs_; }
  const std::vector<TensorId> &ids() const { return ids_; }
  const ModelConfig &config() const { return config_; }

  /// Whether spec `i` is the packed half of an MXFP4 matrix (its scales are
  /// spec i + 1, and the two are made together by generateMxfp4).
  bool isMxfp4Packed(size_t i) const;

  /// How spec `i`'s values are drawn when they are plain normals stored
  /// bf16 (most of a model's bytes: the projections and the bf16 experts),
  /// so that a backend can draw them in its own memory with
  /// k3_synthetic_normal_bf16; nullopt for the rest (planted, uniform,
  /// f32, MXFP4).
  std::optional<DrawnTensor> drawn(size_t i) const;

  /// The bytes of values [begin, end) of dense (bf16 or f32) spec `i` into
  /// `dst` (dst holds value `begin` first). Any cut into pieces gives the
  /// same bytes.
  void generateDense(size_t i, int64_t begin, int64_t end, uint8_t *dst,
                     SyntheticScratch &scratch) const;
  /// Rows [rowBegin, rowEnd) of the MXFP4 matrix whose packed codes are
  /// spec `i`: the codes into `packed`, the scales (spec i + 1) into
  /// `scale` (both the whole matrix's buffers; only those rows are
  /// written). Any cut into runs of rows gives the same bytes.
  void generateMxfp4(size_t i, int64_t rowBegin, int64_t rowEnd,
                     uint8_t *packed, uint8_t *scale,
                     SyntheticScratch &scratch) const;

private:
  struct Impl;
  ModelConfig config_;
  std::vector<TensorId> ids_; ///< before specs_: its initialiser fills ids_
  std::vector<TensorSpec> specs_;
  std::unique_ptr<Impl> impl_;
};

/// Values per piece of a dense tensor when `threads` threads share it: about
/// one piece per thread (so one huge embedding keeps every thread busy), in
/// pieces of 2^14 to 2^21 values.
int64_t syntheticPieceValues(int64_t numel, int threads);

/// The most threads that make synthetic weights (k3-mkmodel, a store).
constexpr int kMaxMakerThreads = 1024;

/// The default thread count for making synthetic weights: K3C_CPU_THREADS
/// when it is set to a positive integer (as for the CPU backend), else the
/// hardware threads; at most kMaxMakerThreads.
int defaultMakerThreads();

/// The prefix of a `--weights` argument that names synthetic weights.
constexpr const char *kSyntheticWeightsPrefix = "synthetic:";

/// Whether `weights` (a --weights argument) names synthetic weights.
bool isSyntheticWeights(const std::string &weights);

/// A store of `config`'s synthetic weights from the seed in `weights`
/// ("synthetic:SEED", SEED a decimal integer): tensors are made on first
/// use with `threads` threads (0: defaultMakerThreads()) and kept until
/// TensorStore::releaseMade(). Planted structure and the dtypes a published
/// checkpoint stores (StoredDtypes::Published): the bytes `k3-mkmodel
/// --real-dtypes --seed SEED` writes for the same config. Errors: a malformed
/// seed (naming the argument).
Expected<TensorStore> openSyntheticWeights(const ModelConfig &config,
                                           const std::string &weights,
                                           int threads = 0);

} // namespace k3

#endif // K3C_RUNTIME_MODEL_SYNTHETIC_H
