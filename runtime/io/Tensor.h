//===- Tensor.h - Element types and read-only tensor views ------*- C++ -*-===//
//
// What a checkpoint tensor is to the runtime: a name, an element type, a
// shape, and bytes that live in a memory-mapped safetensors file (or in a
// buffer owned by whoever made the view).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_TENSOR_H
#define K3C_RUNTIME_IO_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// Element types of safetensors ("BF16", "F32", ...).
enum class DType {
  BF16,
  F16,
  F32,
  F64,
  U8,
  I8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
  BOOL
};

/// Bytes per element.
size_t dtypeSize(DType t);
/// The safetensors spelling ("BF16").
const char *dtypeName(DType t);
/// Parses the safetensors spelling; false when unknown.
bool parseDType(const std::string &name, DType &out);

/// "[a, b, c]", for messages about tensor shapes.
std::string shapeString(const std::vector<int64_t> &shape);

/// A read-only tensor whose bytes someone else owns.
struct TensorView {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  template <typename T> const T *as() const {
    return reinterpret_cast<const T *>(data);
  }
};

/// Name, element type and shape of a tensor whose bytes come later (the
/// streaming writer's header is built from these before any data exists).
struct TensorSpec {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
};

/// A tensor that owns its bytes (what the model maker writes).
struct TensorData {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

} // namespace k3

#endif // K3C_RUNTIME_IO_TENSOR_H
