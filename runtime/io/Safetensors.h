//===- Safetensors.h - Reading and writing safetensors ----------*- C++ -*-===//
//
// The reader is a security boundary: checkpoints come from elsewhere. It maps
// the file read-only and checks the header before anything else reads a byte:
// header length within the file, valid JSON, known dtypes, shapes whose byte
// count equals the data range, ranges inside the data section, no two tensors
// overlapping. Any violation is an error naming the file and the tensor.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_SAFETENSORS_H
#define K3C_RUNTIME_IO_SAFETENSORS_H

#include "runtime/Status.h"
#include "runtime/io/Tensor.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

/// One memory-mapped .safetensors file.
class SafetensorsFile {
public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;

  /// Maps and validates `path`.
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string &path);

  const std::string &path() const { return path_; }
  const std::vector<TensorView> &tensors() const { return tensors_; }
  /// The tensor called `name`, or null.
  const TensorView *find(const std::string &name) const;
  /// The "__metadata__" string map.
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  /// Checks that the file on disk is still the one that was mapped: the
  /// size and modification time recorded at open. A file truncated while
  /// mapped makes any read of the lost pages fault (SIGBUS), which no check
  /// can prevent; this one names the shard before the next run touches it.
  Status checkUnchanged() const;

private:
  SafetensorsFile() = default;
  std::string path_;
  void *map_ = nullptr;
  size_t mapSize_ = 0;
  int64_t mtimeNs_ = 0; ///< st_mtim at open, in nanoseconds
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// A made tensor whose values a backend can draw in its own memory instead
/// of copying the maker's bytes: bf16 values scale · syntheticNormalAt(
/// stream, index) (kernels/synthetic/SyntheticParams.h).
struct DrawnTensor {
  uint64_t stream = 0; ///< the values' splitmix64 state before the first draw
  float scale = 0.0f;
  uint64_t bytes = 0; ///< the tensor's size (TensorStore::drawnAt fills it)
};

/// Tensors that are made rather than read (synthetic weights,
/// runtime/model/Synthetic.h): a TensorStore asks for a tensor's bytes the
/// first time find() names it.
class TensorMaker {
public:
  virtual ~TensorMaker() = default;
  /// How spec `i`'s values are drawn, when a backend may draw them itself
  /// (TensorStore::deferringDrawn); nullopt: only make() makes them.
  virtual std::optional<DrawnTensor> drawn(size_t /*i*/) const {
    return std::nullopt;
  }
  /// Every tensor this maker makes.
  virtual const std::vector<TensorSpec> &specs() const = 0;
  /// The specs made together with spec `i`, ascending, `i` among them (an
  /// MXFP4 matrix's codes and scales).
  virtual std::vector<size_t> group(size_t i) const = 0;
  /// Writes the bytes of every spec of group(i): dst[k] holds the k-th's
  /// byte size.
  virtual void make(size_t i, const std::vector<uint8_t *> &dst) const = 0;
};

/// All tensors of a model directory: `model.safetensors`, or the shards
/// named by `model.safetensors.index.json`, or every `*.safetensors` file;
/// or the tensors of a TensorMaker, made in host memory when first found.
/// Copies share the files and the made tensors.
class TensorStore {
public:
  /// Opens a directory (or a single .safetensors file).
  static Expected<TensorStore> open(const std::string &path);
  /// A store of `maker`'s tensors (thread-safe: find() may be called from
  /// several threads).
  static TensorStore made(std::shared_ptr<const TensorMaker> maker);

  /// The tensor called `name`, or null. A made tensor is made now unless it
  /// is held from an earlier find().
  const TensorView *find(const std::string &name) const;
  /// Every tensor of every file (of a maker: every tensor, all made now).
  std::vector<const TensorView *> all() const;
  size_t size() const;
  /// SafetensorsFile::checkUnchanged for every shard (made tensors: ok).
  Status checkUnchanged() const;
  /// Frees the bytes of the made tensors (the next find() makes them
  /// again); the views find() returned before dangle. A backend that has
  /// copied the weights to its own memory calls it, so that a model larger
  /// than host memory never lives there whole. Files: nothing happens.
  void releaseMade() const;

  /// A copy of this store whose find() does not make the tensors that the
  /// maker says a backend can draw itself (TensorMaker::drawn): their views
  /// have the name, dtype, shape and size, and `data` in an address range
  /// reserved without access, so that reading those bytes on the host
  /// faults instead of reading garbage; drawnAt() maps such an address
  /// back. For a backend that binds bf16 weights as they are (not sliced,
  /// not widened) and draws them in its own memory. A store of files: a
  /// plain copy. (all() of such a store returns those views too: never read
  /// their bytes.)
  TensorStore deferringDrawn() const;
  /// Whether find() defers any tensor (deferringDrawn() of a maker with
  /// drawn tensors).
  bool defersDrawn() const { return deferDrawn_; }
  /// The DrawnTensor of the deferred view whose bytes `p` points into, and
  /// the byte offset of `p` in them; nullopt for any other address.
  std::optional<std::pair<DrawnTensor, uint64_t>>
  drawnAt(const void *p) const;

private:
  struct Made;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView *> index_;
  std::shared_ptr<Made> made_;
  bool deferDrawn_ = false; ///< deferringDrawn()
};

/// Writes `tensors` to one .safetensors file (8-byte aligned data offsets,
/// tensors in the given order, optional string metadata).
///
/// The data section starts 8-byte aligned and the tensors follow each other
/// without gaps, because the official safetensors reader rejects gaps; so a
/// tensor's offset is 8-byte aligned when the sizes before it are multiples
/// of 8 (true of every tensor the model maker writes).
Status writeSafetensors(const std::string &path,
                        const std::vector<TensorData> &tensors,
                        const std::map<std::string, std::string> &metadata = {});

/// Writes a .safetensors file one tensor at a time, so that a file larger
/// than memory needs only one tensor in memory: the header is written from
/// the specs first, then each tensor's bytes in spec order. A file that is
/// not finished is removed when the writer is destroyed.
class SafetensorsWriter {
public:
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter &) = delete;
  SafetensorsWriter &operator=(const SafetensorsWriter &) = delete;

  /// Creates `path` and writes the header for `specs` (same layout as
  /// writeSafetensors).
  static Expected<std::unique_ptr<SafetensorsWriter>>
  create(const std::string &path, const std::vector<TensorSpec> &specs,
         const std::map<std::string, std::string> &metadata = {});

  /// Appends the bytes of the next tensor in spec order; `nbytes` must equal
  /// its numel times its element size.
  Status writeNext(const void *data, size_t nbytes);
  /// Appends part of the data section: bytes continue the current tensor and
  /// may run on into the next ones, so a huge tensor can be written in
  /// pieces. Writing past the last tensor is an error.
  Status append(const void *data, size_t nbytes);
  /// Checks that every tensor was written, then flushes and closes the file.
  Status finish();

  /// Total file size the specs produce (header included).
  uint64_t fileSize() const { return fileSize_; }

private:
  SafetensorsWriter() = default;
  std::string path_;
  void *file_ = nullptr; ///< FILE*
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> sizes_;
  size_t next_ = 0;          ///< tensor the next byte belongs to
  uint64_t doneInNext_ = 0;  ///< bytes of that tensor already written
  uint64_t fileSize_ = 0;
  bool finished_ = false;
};

/// Byte size of a tensor (numel times element size), or an error when a
/// dimension is negative or the product overflows.
Expected<uint64_t> tensorByteSize(DType dtype, const std::vector<int64_t> &shape);

} // namespace k3

#endif // K3C_RUNTIME_IO_SAFETENSORS_H
