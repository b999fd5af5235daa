//===- ModelMaker.cpp - Synthetic checkpoints from a config ---------------===//
//
// Every tensor draws from its own splitmix64 stream, seeded from the model
// seed and the tensor's name, so values do not depend on tensor order, on the
// standard library (no std:: distributions), or on sharding. Approximately
// normal values are Irwin-Hall sums of four uniforms.
//
// Scales (input activations have RMS about 1 after each norm):
//  - projections: std 1/sqrt(in), so outputs keep RMS about 1;
//  - projections that feed the residual stream (o_proj, down_proj, w2,
//    routed_expert_up_proj): std 0.5/sqrt(in), so the residual grows slowly;
//  - norm weights 1 ± 0.1, embeddings std 1, conv weights std 0.5;
//  - router gate std 2/sqrt(D) and a small e_score_correction_bias, so the
//    top-k set changes from token to token;
//  - A_log = log(U[1, 16]), dt_bias U[-0.5, 0.5];
//  - AttnRes projections std 1/sqrt(D) (logits of order 1);
//  - lm_head std 2/sqrt(D): logits spread over a few units.
//
//===----------------------------------------------------------------------===//
#include "runtime/ModelMaker.h"
#include "runtime/ModelWeights.h"
#include "runtime/Safetensors.h"

#include "kernels/common/BF16.h"
#include "kernels/common/MXFP4.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace k3 {

namespace fs = std::filesystem;

namespace {

/// splitmix64: tiny, fast, and its output is fixed by the algorithm.
class Rng {
public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 24 random bits (exact in float).
  float uniform() {
    return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  /// Mean 0, std 1, bell-shaped (Irwin-Hall n = 4), bounded by ±2√3.
  float normal() {
    float s = uniform() + uniform() + uniform() + uniform();
    return (s - 2.0f) * 1.7320508f;
  }

private:
  uint64_t state_;
};

uint64_t fnv1a(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The stream of tensor `name` under `seed`.
Rng tensorRng(uint64_t seed, const std::string &name) {
  Rng mix(seed);
  return Rng(mix.next() ^ fnv1a(name));
}

bool endsWith(const std::string &s, const std::string &t) {
  return s.size() >= t.size() &&
         s.compare(s.size() - t.size(), t.size(), t) == 0;
}

/// How the values of one tensor are drawn.
struct Init {
  enum Kind { Normal, Uniform, NormWeight, ALog } kind = Normal;
  float a = 0, b = 0; ///< Normal: std; Uniform: [a, b)
  int64_t count = 0;  ///< ALog: heads with values (the rest is padding)
};

/// Chooses the init from the tensor's name and shape (K3.md §10 names).
Init initFor(const ModelConfig &c, const TensorSpec &s) {
  const float D = static_cast<float>(c.hiddenSize);
  const std::string &n = s.name;
  Init init;
  if (endsWith(n, "A_log")) {
    init.kind = Init::ALog;
    init.count = c.kda.numHeads;
    return init;
  }
  if (endsWith(n, "dt_bias")) {
    init.kind = Init::Uniform;
    init.a = -0.5f;
    init.b = 0.5f;
    return init;
  }
  if (endsWith(n, "e_score_correction_bias")) {
    init.a = 0.05f;
    return init;
  }
  if (endsWith(n, "norm.weight")) { // every RMSNorm, incl. q_a/kv_a_layernorm
    init.kind = Init::NormWeight;
    return init;
  }
  if (endsWith(n, "embed_tokens.weight")) {
    init.a = 1.0f;
    return init;
  }
  if (endsWith(n, "lm_head.weight") ||
      endsWith(n, "block_sparse_moe.gate.weight")) {
    init.a = 2.0f / std::sqrt(D);
    return init;
  }
  if (endsWith(n, "conv1d.weight")) {
    init.a = 0.5f;
    return init;
  }
  // A Linear [out, in] (bf16 weight, or MXFP4 packed with in/2 columns).
  float in = static_cast<float>(s.shape.back());
  if (endsWith(n, ".weight_packed"))
    in *= 2;
  bool toResidual = endsWith(n, "o_proj.weight") ||
                    (endsWith(n, "down_proj.weight") &&
                     !endsWith(n, "routed_expert_down_proj.weight")) ||
                    endsWith(n, ".w2.weight") ||
                    endsWith(n, ".w2.weight_packed") ||
                    endsWith(n, "routed_expert_up_proj.weight");
  init.a = (toResidual ? 0.5f : 1.0f) / std::sqrt(in);
  return init;
}

/// Fills `out` with the next `count` values of the tensor's stream;
/// `offset` is the index of the first one (for A_log padding).
void draw(Rng &rng, const Init &init, int64_t offset, float *out,
          int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    switch (init.kind) {
    case Init::Normal:
      out[i] = init.a * rng.normal();
      break;
    case Init::Uniform:
      out[i] = rng.uniform(init.a, init.b);
      break;
    case Init::NormWeight:
      out[i] = 1.0f + rng.uniform(-0.1f, 0.1f);
      break;
    case Init::ALog:
      out[i] =
          offset + i < init.count ? std::log(rng.uniform(1.0f, 16.0f)) : 0.0f;
      break;
    }
  }
}

/// A shard being filled: its file name and the specs it holds.
struct Shard {
  std::string file;
  std::vector<TensorSpec> specs;
  uint64_t bytes = 0;
};

class Maker {
public:
  Maker(const ModelConfig &c, uint64_t seed, ProgressFn progress)
      : config_(c), seed_(seed), progress_(std::move(progress)) {}

  Status writeShard(const std::string &path, const Shard &shard) {
    Expected<std::unique_ptr<SafetensorsWriter>> w =
        SafetensorsWriter::create(path, shard.specs, {{"format", "pt"}});
    if (!w)
      return w.status();
    SafetensorsWriter &writer = **w;
    for (size_t i = 0; i < shard.specs.size(); ++i) {
      const TensorSpec &s = shard.specs[i];
      if (endsWith(s.name, ".weight_packed")) {
        // Packed and scale are consecutive specs of one expert matrix.
        if (i + 1 >= shard.specs.size() ||
            shard.specs[i + 1].name !=
                s.name.substr(0, s.name.size() - 7) + "_scale")
          return makeError("internal: ", s.name,
                           " is not followed by its scale in one shard");
        K3_RETURN_IF_ERROR(writeMxfp4(writer, s));
        ++i;
        continue;
      }
      K3_RETURN_IF_ERROR(writeDense(writer, s));
    }
    return writer.finish();
  }

  uint64_t done = 0, total = 0;

private:
  void report(uint64_t bytes) {
    done += bytes;
    if (progress_)
      progress_(done, total);
  }

  /// A bf16 or f32 tensor, in chunks so huge embeddings need little memory.
  Status writeDense(SafetensorsWriter &w, const TensorSpec &s) {
    Rng rng = tensorRng(seed_, s.name);
    Init init = initFor(config_, s);
    int64_t numel = 1;
    for (int64_t d : s.shape)
      numel *= d;
    constexpr int64_t kChunk = 1 << 22; // elements per piece
    std::vector<float> values;
    std::vector<uint8_t> bytes;
    for (int64_t start = 0; start < numel; start += kChunk) {
      int64_t n = std::min(kChunk, numel - start);
      values.resize(static_cast<size_t>(n));
      draw(rng, init, start, values.data(), n);
      if (s.dtype == DType::BF16) {
        bytes.resize(static_cast<size_t>(n) * 2);
        bf16_t *out = reinterpret_cast<bf16_t *>(bytes.data());
        for (int64_t i = 0; i < n; ++i)
          out[i] = floatToBf16(values[i]);
      } else if (s.dtype == DType::F32) {
        bytes.resize(static_cast<size_t>(n) * 4);
        std::memcpy(bytes.data(), values.data(), bytes.size());
      } else {
        return makeError("internal: no generator for ", dtypeName(s.dtype),
                         " tensor ", s.name);
      }
      K3_RETURN_IF_ERROR(w.append(bytes.data(), bytes.size()));
      report(bytes.size());
    }
    return Status::ok();
  }

  /// An MXFP4 expert matrix: draw it in float, quantise, write both parts.
  Status writeMxfp4(SafetensorsWriter &w, const TensorSpec &packedSpec) {
    int64_t rows = packedSpec.shape[0], in = packedSpec.shape[1] * 2;
    Rng rng = tensorRng(seed_, packedSpec.name);
    Init init = initFor(config_, packedSpec);
    std::vector<float> values(static_cast<size_t>(rows * in));
    draw(rng, init, 0, values.data(), rows * in);
    std::vector<uint8_t> packed, scale;
    quantizeMxfp4(values.data(), rows, in, packed, scale);
    K3_RETURN_IF_ERROR(w.writeNext(packed.data(), packed.size()));
    K3_RETURN_IF_ERROR(w.writeNext(scale.data(), scale.size()));
    report(packed.size() + scale.size());
    return Status::ok();
  }

  const ModelConfig &config_;
  uint64_t seed_;
  ProgressFn progress_;
};

/// Splits the specs into shards of at most `shardBytes` (0: one file),
/// keeping an MXFP4 packed/scale pair together.
std::vector<Shard> planShards(const std::vector<TensorSpec> &specs,
                              int64_t shardBytes) {
  std::vector<Shard> shards(1);
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t bytes = *tensorByteSize(specs[i].dtype, specs[i].shape);
    bool pair =
        endsWith(specs[i].name, ".weight_packed") && i + 1 < specs.size();
    uint64_t group =
        bytes +
        (pair ? *tensorByteSize(specs[i + 1].dtype, specs[i + 1].shape) : 0);
    if (shardBytes > 0 && !shards.back().specs.empty() &&
        shards.back().bytes + group > static_cast<uint64_t>(shardBytes))
      shards.emplace_back();
    shards.back().specs.push_back(specs[i]);
    if (pair)
      shards.back().specs.push_back(specs[++i]);
    shards.back().bytes += group;
  }
  if (shardBytes <= 0) {
    shards[0].file = "model.safetensors";
  } else {
    char buf[64];
    for (size_t i = 0; i < shards.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1,
                    shards.size());
      shards[i].file = buf;
    }
  }
  return shards;
}

Status writeText(const fs::path &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return makeError(path.string(), ": cannot create");
  out << text;
  out.close();
  if (!out)
    return makeError(path.string(), ": write error");
  return Status::ok();
}

/// Removes checkpoint files an earlier run may have left in `dir`: a stale
/// index or single file would take precedence over what is written now.
Status removeStaleCheckpoint(const fs::path &dir) {
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool shard = name.rfind("model-", 0) == 0 &&
                 endsWith(name, ".safetensors") &&
                 name.find("-of-") != std::string::npos;
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        shard) {
      fs::remove(e.path(), ec);
      if (ec)
        return makeError(e.path().string(),
                         ": cannot remove the old file: ", ec.message());
    }
  }
  if (ec)
    return makeError(dir.string(), ": cannot list: ", ec.message());
  return Status::ok();
}

} // namespace

Status makeModel(const ModelConfig &config, uint64_t seed,
                 const std::string &dir, ProgressFn progress,
                 int64_t shardBytes) {
  K3_RETURN_IF_ERROR(config.validate());
  std::error_code ec;
  fs::path root(dir);
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root))
    return makeError(dir, ": cannot create the output directory",
                     ec ? ": " + ec.message() : "");
  K3_RETURN_IF_ERROR(removeStaleCheckpoint(root));
  K3_RETURN_IF_ERROR(writeText(root / "config.json", writeConfigJson(config)));

  std::vector<TensorSpec> specs = expectedTensorSpecs(config);
  for (const TensorSpec &s : specs)
    if (!tensorByteSize(s.dtype, s.shape))
      return makeError("tensor ", s.name, " is too large");
  std::vector<Shard> shards = planShards(specs, shardBytes);

  Maker maker(config, seed, std::move(progress));
  for (const Shard &s : shards)
    maker.total += s.bytes;
  for (const Shard &s : shards)
    K3_RETURN_IF_ERROR(maker.writeShard((root / s.file).string(), s));

  if (shardBytes > 0) {
    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    for (const Shard &s : shards)
      for (const TensorSpec &t : s.specs)
        weightMap[t.name] = s.file;
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", maker.total}};
    index["weight_map"] = weightMap;
    K3_RETURN_IF_ERROR(
        writeText(root / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return Status::ok();
}

} // namespace k3
