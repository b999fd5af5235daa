//===- Executable.cpp - Plans embedded in the runtime binary --------------===//
//
// Only the last 16 bytes are read to decide; the plan itself is read with a
// seek, so a large binary without a plan costs one small read at start.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/Executable.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace k3 {

namespace {

/// Size of the file and, when it ends with a trailer, the plan's length.
Status readTrailer(std::ifstream &in, const std::string &path, uint64_t &size,
                   std::optional<uint64_t> &planLength) {
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (end < 0)
    return makeError(path, ": cannot determine the file size");
  size = static_cast<uint64_t>(end);
  planLength.reset();
  if (size < kExeTrailerSize)
    return Status::ok();
  unsigned char t[kExeTrailerSize];
  in.seekg(static_cast<std::streamoff>(size - kExeTrailerSize));
  if (!in.read(reinterpret_cast<char *>(t), kExeTrailerSize))
    return makeError(path, ": cannot read the end of the file");
  if (std::memcmp(t + 8, kExeTrailerMagic, 8) != 0)
    return Status::ok();
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i)
    len = (len << 8) | t[i];
  if (len > size - kExeTrailerSize)
    return makeError(path, ": embedded plan trailer says ", len,
                     " bytes but the file has only ", size - kExeTrailerSize,
                     " before it (the executable is corrupted)");
  planLength = len;
  return Status::ok();
}

} // namespace

Expected<std::optional<std::string>>
findEmbeddedPlan(const std::string &exePath) {
  std::ifstream in(exePath, std::ios::binary);
  if (!in)
    return makeError(exePath, ": cannot open to look for an embedded plan");
  uint64_t size = 0;
  std::optional<uint64_t> len;
  K3_RETURN_IF_ERROR(readTrailer(in, exePath, size, len));
  if (!len)
    return std::optional<std::string>();
  std::string plan(*len, '\0');
  in.seekg(static_cast<std::streamoff>(size - kExeTrailerSize - *len));
  if (!in.read(plan.data(), static_cast<std::streamsize>(*len)))
    return makeError(exePath, ": cannot read the embedded plan");
  return std::optional<std::string>(std::move(plan));
}

Status writeExecutable(const std::string &runtimeBinaryPath,
                       const std::string &planBytes,
                       const std::string &outPath) {
  std::ifstream in(runtimeBinaryPath, std::ios::binary);
  if (!in)
    return makeError(runtimeBinaryPath, ": cannot open the runtime binary");
  uint64_t size = 0;
  std::optional<uint64_t> len;
  K3_RETURN_IF_ERROR(readTrailer(in, runtimeBinaryPath, size, len));
  // A binary that already carries a plan contributes only its runtime part.
  const uint64_t keep = len ? size - kExeTrailerSize - *len : size;

  const std::string tmp = outPath + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return makeError(tmp, ": cannot open for writing");
    in.clear();
    in.seekg(0);
    std::vector<char> buf(1 << 20);
    uint64_t left = keep;
    while (left > 0) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      if (!in.read(buf.data(), static_cast<std::streamsize>(n))) {
        std::remove(tmp.c_str());
        return makeError(runtimeBinaryPath, ": read failed");
      }
      out.write(buf.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    out.write(planBytes.data(), static_cast<std::streamsize>(planBytes.size()));
    unsigned char t[kExeTrailerSize];
    uint64_t l = planBytes.size();
    for (int i = 0; i < 8; ++i, l >>= 8)
      t[i] = static_cast<unsigned char>(l & 0xFF);
    std::memcpy(t + 8, kExeTrailerMagic, 8);
    out.write(reinterpret_cast<const char *>(t), kExeTrailerSize);
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return makeError(tmp, ": write failed");
    }
  }
  if (::chmod(tmp.c_str(), 0755) != 0) {
    std::remove(tmp.c_str());
    return makeError(tmp, ": cannot make it executable");
  }
  if (std::rename(tmp.c_str(), outPath.c_str()) != 0) {
    std::remove(tmp.c_str());
    return makeError(outPath, ": cannot rename ", tmp, " into place");
  }
  return Status::ok();
}

} // namespace k3
