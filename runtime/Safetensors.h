//===- Safetensors.h - Reading and writing safetensors ----------*- C++ -*-===//
//
// The reader is a security boundary: checkpoints come from elsewhere. It maps
// the file read-only and checks the header before anything else reads a byte:
// header length within the file, valid JSON, known dtypes, shapes whose byte
// count equals the data range, ranges inside the data section, no two tensors
// overlapping. Any violation is an error naming the file and the tensor.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_SAFETENSORS_H
#define K3C_RUNTIME_SAFETENSORS_H

#include "runtime/Status.h"
#include "runtime/Tensor.h"

#include <map>
#include <memory>
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

private:
  SafetensorsFile() = default;
  std::string path_;
  void *map_ = nullptr;
  size_t mapSize_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// All tensors of a model directory: `model.safetensors`, or the shards
/// named by `model.safetensors.index.json`, or every `*.safetensors` file.
class TensorStore {
public:
  /// Opens a directory (or a single .safetensors file).
  static Expected<TensorStore> open(const std::string &path);

  /// The tensor called `name`, or null.
  const TensorView *find(const std::string &name) const;
  /// Every tensor of every file.
  std::vector<const TensorView *> all() const;
  size_t size() const { return index_.size(); }

private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView *> index_;
};

/// Writes `tensors` to one .safetensors file (8-byte aligned data offsets,
/// tensors in the given order, optional string metadata).
Status writeSafetensors(const std::string &path,
                        const std::vector<TensorData> &tensors,
                        const std::map<std::string, std::string> &metadata = {});

} // namespace k3

#endif // K3C_RUNTIME_SAFETENSORS_H
