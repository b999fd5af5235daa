//===- ModelMaker.cpp - Synthetic checkpoints from a config ---------------===//
//
// Writes the synthetic weights (runtime/model/Synthetic.h) as safetensors
// shards: tensors are cut into pieces that threads make at once, and one
// thread writes the pieces in order (struct Piece, Maker), so the files are
// the same for any thread count.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/io/Safetensors.h"
#include "runtime/model/Synthetic.h"
#include "runtime/model/Tensors.h"

#include "kernels/common/BF16.h"
#include "kernels/common/MXFP4.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

namespace k3 {

namespace fs = std::filesystem;

namespace {

/// A shard being filled: its file name and the specs it holds.
struct Shard {
  std::string file;
  std::vector<TensorSpec> specs;
  std::vector<size_t> index; ///< each spec's index in SyntheticWeights::specs
  uint64_t bytes = 0;
};

/// The unit of work: a run of a dense tensor's values, or a whole MXFP4
/// expert matrix (its packed codes, then its scales: consecutive specs, so
/// consecutive in the file). Pieces in order are the bytes of the shards in
/// order; each is a function of the seed, the tensor's name and the sizes
/// alone, so any number of threads gives the same bytes.
struct Piece {
  size_t shard = 0;
  size_t index = 0; ///< the dense tensor, or the packed part (specs index)
  bool mxfp4 = false;
  int64_t begin = 0, end = 0; ///< dense: values [begin, end)
  uint64_t bytes = 0;
};

/// An output buffer that keeps its memory between pieces (no zeroing).
struct Buffer {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0, capacity = 0;
  uint8_t *resize(size_t n) {
    if (n > capacity) {
      data.reset(new uint8_t[n]);
      capacity = n;
    }
    size = n;
    return data.get();
  }
};

class Maker {
public:
  Maker(const SyntheticWeights &weights, const fs::path &root,
        const std::vector<Shard> &shards, ProgressFn progress)
      : weights_(weights), root_(root), shards_(shards),
        progress_(std::move(progress)) {
    for (const Shard &s : shards_)
      total += s.bytes;
    staged_.reserve(kStageBytes);
  }

  /// Generates and writes every shard with `threads` generating threads.
  Status run(int threads) {
    K3_RETURN_IF_ERROR(planPieces(threads));
    Status st = threads <= 1 || pieces_.size() <= 1 ? runSerial()
                                                    : runParallel(threads);
    if (!st)
      return st;
    return closeShards(shards_.size());
  }

  uint64_t done = 0, total = 0;

private:
  Status planPieces(int threads) {
    for (size_t k = 0; k < shards_.size(); ++k) {
      const std::vector<TensorSpec> &specs = shards_[k].specs;
      for (size_t i = 0; i < specs.size(); ++i) {
        const TensorSpec &s = specs[i];
        uint64_t bytes = *tensorByteSize(s.dtype, s.shape);
        if (weights_.isMxfp4Packed(shards_[k].index[i])) {
          // Packed and scale are consecutive specs of one expert matrix.
          if (i + 1 >= specs.size() ||
              specs[i + 1].name !=
                  s.name.substr(0, s.name.size() - 7) + "_scale")
            return makeError("internal: ", s.name,
                             " is not followed by its scale in one shard");
          Piece p;
          p.shard = k;
          p.index = shards_[k].index[i];
          p.mxfp4 = true;
          p.bytes =
              bytes + *tensorByteSize(specs[i + 1].dtype, specs[i + 1].shape);
          pieces_.push_back(p);
          ++i;
          continue;
        }
        if (s.dtype != DType::BF16 && s.dtype != DType::F32)
          return makeError("internal: no generator for ", dtypeName(s.dtype),
                           " tensor ", s.name);
        int64_t numel = 1;
        for (int64_t d : s.shape)
          numel *= d;
        const int64_t step = syntheticPieceValues(numel, threads);
        const uint64_t size = dtypeSize(s.dtype);
        for (int64_t b = 0; b < numel; b += step) {
          Piece p;
          p.shard = k;
          p.index = shards_[k].index[i];
          p.begin = b;
          p.end = std::min(numel, b + step);
          p.bytes = static_cast<uint64_t>(p.end - p.begin) * size;
          pieces_.push_back(p);
        }
      }
    }
    return Status::ok();
  }

  /// The bytes of piece `p` into `out` (an MXFP4 matrix: all its packed
  /// rows, then all its scale rows, as the shard holds them).
  void generate(const Piece &p, Buffer &out, SyntheticScratch &scratch) const {
    uint8_t *dst = out.resize(static_cast<size_t>(p.bytes));
    if (p.mxfp4) {
      const TensorSpec &packed = weights_.specs()[p.index];
      weights_.generateMxfp4(p.index, 0, packed.shape[0], dst,
                             dst + *tensorByteSize(packed.dtype, packed.shape),
                             scratch);
      return;
    }
    weights_.generateDense(p.index, p.begin, p.end, dst, scratch);
  }

  /// Appends piece `p` to its shard (opening it, and finishing the shards
  /// before it, when it is the shard's first) and reports progress.
  Status write(const Piece &p, const Buffer &buf) {
    K3_RETURN_IF_ERROR(closeShards(p.shard));
    K3_RETURN_IF_ERROR(openShard());
    // Small pieces are gathered, so the file gets large sequential writes.
    if (staged_.size() + buf.size > kStageBytes)
      K3_RETURN_IF_ERROR(flush());
    if (buf.size >= kStageBytes)
      K3_RETURN_IF_ERROR(writer_->append(buf.data.get(), buf.size));
    else
      staged_.insert(staged_.end(), buf.data.get(), buf.data.get() + buf.size);
    done += buf.size;
    if (progress_)
      progress_(done, total);
    return Status::ok();
  }

  /// Creates the file of shard shard_ (its header) unless it is open.
  Status openShard() {
    if (writer_)
      return Status::ok();
    const Shard &s = shards_[shard_];
    Expected<std::unique_ptr<SafetensorsWriter>> w = SafetensorsWriter::create(
        (root_ / s.file).string(), s.specs, {{"format", "pt"}});
    if (!w)
      return w.status();
    writer_ = std::move(*w);
    return Status::ok();
  }

  /// Appends the gathered small pieces to the open shard.
  Status flush() {
    if (staged_.empty())
      return Status::ok();
    Status st = writer_->append(staged_.data(), staged_.size());
    staged_.clear();
    return st;
  }

  /// Finishes the open shard and writes every shard before `upTo` that has
  /// no piece (only empty tensors), so that the open shard is `upTo`'s.
  Status closeShards(size_t upTo) {
    while (shard_ < upTo) {
      K3_RETURN_IF_ERROR(openShard());
      K3_RETURN_IF_ERROR(flush());
      K3_RETURN_IF_ERROR(writer_->finish());
      writer_.reset();
      ++shard_;
    }
    return Status::ok();
  }

  Status runSerial() {
    Buffer buf;
    SyntheticScratch scratch;
    for (const Piece &p : pieces_) {
      generate(p, buf, scratch);
      K3_RETURN_IF_ERROR(write(p, buf));
    }
    return Status::ok();
  }

  /// `threads` workers take pieces in order and generate them into a ring
  /// of threads + 2 buffers; this thread writes them in order. A worker
  /// takes piece i only when piece i - ring has been written (its buffer is
  /// free), so at most `ring` pieces are in memory.
  Status runParallel(int threads) {
    const size_t ring = static_cast<size_t>(threads) + 2;
    std::vector<Buffer> buffers(ring);
    std::vector<char> ready(ring, 0);
    std::mutex mutex;
    std::condition_variable canTake, canWrite;
    size_t next = 0, written = 0;
    bool stop = false;
    auto worker = [&] {
      SyntheticScratch scratch;
      for (;;) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(mutex);
          canTake.wait(lock, [&] {
            return stop || next >= pieces_.size() || next < written + ring;
          });
          if (stop || next >= pieces_.size())
            return;
          i = next++;
        }
        generate(pieces_[i], buffers[i % ring], scratch);
        {
          std::lock_guard<std::mutex> lock(mutex);
          ready[i % ring] = 1;
        }
        canWrite.notify_one();
      }
    };
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back(worker);
    Status st = Status::ok();
    for (size_t i = 0; i < pieces_.size() && st; ++i) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        canWrite.wait(lock, [&] { return ready[i % ring] != 0; });
      }
      st = write(pieces_[i], buffers[i % ring]);
      {
        std::lock_guard<std::mutex> lock(mutex);
        ready[i % ring] = 0;
        ++written;
        stop = !st;
      }
      canTake.notify_all();
    }
    for (std::thread &t : workers)
      t.join();
    return st;
  }

  const SyntheticWeights &weights_;
  fs::path root_;
  const std::vector<Shard> &shards_;
  ProgressFn progress_;
  std::vector<Piece> pieces_;
  size_t shard_ = 0; ///< the shard being written
  std::unique_ptr<SafetensorsWriter> writer_;
  static constexpr size_t kStageBytes = size_t(8) << 20;
  std::vector<uint8_t> staged_; ///< bytes of small pieces not yet appended
};

/// Splits the weights' specs into shards of at most `shardBytes`
/// (0: one file), keeping an MXFP4 packed/scale pair together.
std::vector<Shard> planShards(const SyntheticWeights &weights,
                              int64_t shardBytes) {
  const std::vector<TensorSpec> &specs = weights.specs();
  std::vector<Shard> shards(1);
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t bytes = *tensorByteSize(specs[i].dtype, specs[i].shape);
    bool pair = weights.isMxfp4Packed(i) && i + 1 < specs.size();
    uint64_t group =
        bytes +
        (pair ? *tensorByteSize(specs[i + 1].dtype, specs[i + 1].shape) : 0);
    if (shardBytes > 0 && !shards.back().specs.empty() &&
        shards.back().bytes + group > static_cast<uint64_t>(shardBytes))
      shards.emplace_back();
    shards.back().specs.push_back(specs[i]);
    shards.back().index.push_back(i);
    if (pair) {
      shards.back().specs.push_back(specs[++i]);
      shards.back().index.push_back(i);
    }
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
                 e.path().extension() == ".safetensors" &&
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
                 int64_t shardBytes, Structure structure, int threads,
                 StoredDtypes dtypes) {
  K3_RETURN_IF_ERROR(config.validate());
  std::error_code ec;
  fs::path root(dir);
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root))
    return makeError(dir, ": cannot create the output directory",
                     ec ? ": " + ec.message() : "");
  K3_RETURN_IF_ERROR(removeStaleCheckpoint(root));
  K3_RETURN_IF_ERROR(writeText(root / "config.json", writeConfigJson(config)));

  const SyntheticWeights weights(config, seed, structure, dtypes);
  const std::vector<TensorSpec> &specs = weights.specs();
  for (const TensorSpec &s : specs)
    if (!tensorByteSize(s.dtype, s.shape))
      return makeError("tensor ", s.name, " is too large");
  std::vector<Shard> shards = planShards(weights, shardBytes);

  Maker maker(weights, root, shards, std::move(progress));
  K3_RETURN_IF_ERROR(maker.run(threads > 0 ? std::min(threads, kMaxMakerThreads)
                                           : defaultMakerThreads()));

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
