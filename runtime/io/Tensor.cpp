//===- Tensor.cpp - Element types and read-only tensor views --------------===//
//
// The one table of element types: their safetensors spellings and sizes
// (the plan's element types take their sizes from it too).
//
//===----------------------------------------------------------------------===//
#include "runtime/io/Tensor.h"

namespace k3 {

namespace {
struct DTypeInfo {
  DType type;
  const char *name;
  size_t size;
};
const DTypeInfo kDTypes[] = {
    {DType::BF16, "BF16", 2}, {DType::F16, "F16", 2}, {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2}, {DType::I32, "I32", 4},
    {DType::U32, "U32", 4},   {DType::I64, "I64", 8}, {DType::U64, "U64", 8},
    {DType::BOOL, "BOOL", 1},
};
} // namespace

size_t dtypeSize(DType t) {
  for (const DTypeInfo &i : kDTypes)
    if (i.type == t)
      return i.size;
  return 0;
}

const char *dtypeName(DType t) {
  for (const DTypeInfo &i : kDTypes)
    if (i.type == t)
      return i.name;
  return "?";
}

bool parseDType(const std::string &name, DType &out) {
  for (const DTypeInfo &i : kDTypes)
    if (name == i.name) {
      out = i.type;
      return true;
    }
  return false;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace k3
