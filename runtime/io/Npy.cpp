//===- Npy.cpp - NumPy .npy files of float32 matrices ---------------------===//
//
// Format 1.0: magic "\x93NUMPY", version 1 0, a little-endian uint16 header
// length, then a Python dict literal padded with spaces and ended by '\n' so
// that the data starts 64-byte aligned.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/Npy.h"

#include "runtime/io/AtomicFile.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace k3 {

namespace {
const char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;
/// The reader's bound on a file (logits of 4096 steps over a 163840 vocab
/// are 2.7 GB).
constexpr uint64_t kMaxNpyBytes = uint64_t(16) << 30;

/// Bytes of rows * cols float32 values, or false when that overflows.
bool npyDataBytes(int64_t rows, int64_t cols, size_t &bytes) {
  int64_t n = 0;
  return rows >= 0 && cols >= 0 && !__builtin_mul_overflow(rows, cols, &n) &&
         !__builtin_mul_overflow(static_cast<size_t>(n), sizeof(float),
                                 &bytes);
}
} // namespace

std::string encodeNpyF32(const float *data, int64_t rows, int64_t cols) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                     std::to_string(rows) + ", " + std::to_string(cols) +
                     "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n'.
  const size_t prefix = kNpyMagicLen + 4;
  size_t total = prefix + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kNpyMagic, kNpyMagicLen);
  out += '\x01';
  out += '\x00';
  const uint16_t len = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>(len >> 8);
  out += dict;
  // x86 and aarch64 Linux are little-endian, matching '<f4'.
  out.append(reinterpret_cast<const char *>(data),
             sizeof(float) * static_cast<size_t>(rows * cols));
  return out;
}

Status writeNpyF32(const std::string &path, const float *data, int64_t rows,
                   int64_t cols) {
  size_t bytes = 0;
  if (!npyDataBytes(rows, cols, bytes))
    return makeError(path, ": bad .npy shape [", rows, ", ", cols, "]");
  // A temporary next to `path`, renamed over it once complete.
  return writeFileAtomic(path, encodeNpyF32(data, rows, cols));
}

Expected<NpyF32> readNpyF32(const std::string &path) {
  std::string b;
  K3_RETURN_IF_ERROR(readRegularFile(path, kMaxNpyBytes, b, ".npy file"));
  if (b.size() < kNpyMagicLen + 4 || b.compare(0, kNpyMagicLen, kNpyMagic) != 0)
    return makeError(path, ": not a .npy file");
  if (b[6] != 1 || b[7] != 0)
    return makeError(path, ": only .npy version 1.0 is read");
  const size_t len = static_cast<uint8_t>(b[8]) |
                     (static_cast<size_t>(static_cast<uint8_t>(b[9])) << 8);
  if (b.size() < 10 + len)
    return makeError(path, ": truncated .npy header");
  const std::string dict = b.substr(10, len);
  if (dict.find("'descr': '<f4'") == std::string::npos ||
      dict.find("'fortran_order': False") == std::string::npos)
    return makeError(path, ": expected little-endian float32 in C order");
  NpyF32 out;
  const size_t s = dict.find("'shape': (");
  if (s == std::string::npos ||
      std::sscanf(dict.c_str() + s, "'shape': (%" SCNd64 ", %" SCNd64 ")",
                  &out.rows, &out.cols) != 2 ||
      out.rows < 0 || out.cols < 0)
    return makeError(path, ": expected a 2-D shape");
  size_t want = 0;
  if (!npyDataBytes(out.rows, out.cols, want))
    return makeError(path, ": shape (", out.rows, ", ", out.cols,
                     ") is too large");
  if (b.size() - 10 - len != want)
    return makeError(path, ": data has ", b.size() - 10 - len,
                     " bytes, the shape needs ", want);
  out.values.resize(want / sizeof(float));
  std::memcpy(out.values.data(), b.data() + 10 + len, want);
  return out;
}

} // namespace k3
