//===- safetensors_fuzz.cpp - libFuzzer target: the safetensors reader ----===//
//
// Input: a whole .safetensors file. It is put in a memfd (a regular file
// without touching the disk) and opened through /proc/self/fd like any
// shard. SafetensorsFile::open must return the file or an error; for an
// accepted file every tensor view must lie inside the mapping with the size
// its dtype and shape say (each byte is read, so a view outside the mapping
// faults), no two views may overlap, and names must be unique.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/Safetensors.h"

#include "FuzzUtil.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0)
      break;
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  {
    k3::Expected<std::unique_ptr<k3::SafetensorsFile>> f =
        k3::SafetensorsFile::open(path);
    if (f) {
      std::set<std::string> names;
      uint64_t sum = 0;
      const uint8_t *prevEnd = nullptr;
      for (const k3::TensorView &t : (*f)->tensors()) {
        K3_FUZZ_CHECK(names.insert(t.name).second, "a tensor name twice");
        k3::Expected<uint64_t> bytes = k3::tensorByteSize(t.dtype, t.shape);
        K3_FUZZ_CHECK(bytes.hasValue() && *bytes == t.nbytes,
                      "a view whose size is not its dtype times its shape");
        K3_FUZZ_CHECK(t.numel() >= 0, "a negative element count");
        K3_FUZZ_CHECK(t.nbytes == 0 || !prevEnd || t.data >= prevEnd,
                      "overlapping views");
        for (size_t i = 0; i < t.nbytes; ++i)
          sum += t.data[i];
        if (t.nbytes)
          prevEnd = t.data + t.nbytes;
        K3_FUZZ_CHECK((*f)->find(t.name) == &t, "find() disagrees");
      }
      K3_FUZZ_CHECK((*f)->checkUnchanged().isOk(), "the memfd changed");
      // Keep the reads.
      volatile uint64_t sink = sum;
      (void)sink;
    } else {
      K3_FUZZ_CHECK(!f.message().empty(), "an error without a message");
    }
  }
  ::close(fd);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  // Half the time: a structural mutation of the JSON header, with the
  // length prefix rewritten to match and the data section kept.
  std::mt19937_64 rng(seed);
  uint64_t len = 0;
  for (int i = 7; size >= 8 && i >= 0; --i)
    len = (len << 8) | data[i];
  if (size >= 8 && len <= size - 8 && rng() % 2 == 0) {
    std::string header(reinterpret_cast<const char *>(data) + 8, len);
    const std::string rest(reinterpret_cast<const char *>(data) + 8 + len,
                           size - 8 - len);
    header.resize(std::max<size_t>(maxSize, 8) - 8);
    const size_t n = k3::fuzz::mutateJsonText(
        reinterpret_cast<uint8_t *>(header.data()), len, header.size(), rng);
    if (n && 8 + n + rest.size() <= maxSize) {
      for (int i = 0; i < 8; ++i)
        data[i] = static_cast<uint8_t>(uint64_t(n) >> (8 * i));
      std::memcpy(data + 8, header.data(), n);
      std::memcpy(data + 8 + n, rest.data(), rest.size());
      return 8 + n + rest.size();
    }
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}
