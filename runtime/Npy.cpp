//===- Npy.cpp - NumPy .npy files of float32 matrices ---------------------===//
//
// Format 1.0: magic "\x93NUMPY", version 1 0, a little-endian uint16 header
// length, then a Python dict literal padded with spaces and ended by '\n' so
// that the data starts 64-byte aligned.
//
//===----------------------------------------------------------------------===//
#include "runtime/Npy.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace k3 {

namespace {
const char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;
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
  if (rows < 0 || cols < 0)
    return makeError(path, ": bad .npy shape [", rows, ", ", cols, "]");
  const std::string bytes = encodeNpyF32(data, rows, cols);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return makeError(path, ": cannot open for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    return makeError(path, ": write failed");
  return Status::ok();
}

Expected<NpyF32> readNpyF32(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return makeError(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
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
  const size_t want = sizeof(float) * static_cast<size_t>(out.rows * out.cols);
  if (b.size() - 10 - len != want)
    return makeError(path, ": data has ", b.size() - 10 - len,
                     " bytes, the shape needs ", want);
  out.values.resize(static_cast<size_t>(out.rows * out.cols));
  std::memcpy(out.values.data(), b.data() + 10 + len, want);
  return out;
}

} // namespace k3
