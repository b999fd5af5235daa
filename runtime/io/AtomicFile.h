//===- AtomicFile.h - Bounded reads and atomic writes of files --*- C++ -*-===//
//
// Every file the runtime and the tools read or write goes through here, so
// that the rules are stated once:
//  * reads take regular files only, up to a size the caller names: a FIFO is
//    opened without blocking and refused, /dev/zero or a directory is
//    refused before a byte is read, and a file larger than the bound is
//    refused instead of being read until memory runs out;
//  * writes go to a unique temporary file in the target's folder (mkstemp)
//    that is renamed over the target only once every byte is written and
//    flushed, so a failed or concurrent write never leaves a truncated or
//    mixed file behind; a target that exists must be a regular file (never a
//    device node, a FIFO or a directory, which a rename would replace) and
//    must not be one of the command's inputs (same inode), and every failed
//    write is an error. The one exception is the null device: `-o /dev/null`
//    discards the output and leaves the device node alone.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_ATOMICFILE_H
#define K3C_RUNTIME_IO_ATOMICFILE_H

#include "runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

/// Bounds on what readRegularFile accepts, per kind of file.
constexpr uint64_t kMaxJsonFileBytes = uint64_t(16) << 20; ///< config.json
constexpr uint64_t kMaxIndexFileBytes = uint64_t(256) << 20; ///< shard index
constexpr uint64_t kMaxPlanFileBytes = uint64_t(1) << 30;  ///< plans (PTX)

/// Reads all of `path` into `out`. Refuses (naming `path`) anything but a
/// regular file of at most `maxBytes` bytes; `what` names the file's role
/// in messages ("config file").
Status readRegularFile(const std::string &path, uint64_t maxBytes,
                       std::string &out, const char *what = "file");

/// How an output file is created.
struct OutputOptions {
  /// Mode 0777 & ~umask (an executable) instead of 0666 & ~umask.
  bool executable = false;
  /// Files the output must not replace: a target with the same device and
  /// inode as one of these is refused (`k3c cfg.json -o cfg.json`).
  std::vector<std::string> inputs;
};

/// Checks that `path` may be (re)placed by an output: it does not exist, or
/// it is a regular file (symbolic links followed) that is none of `inputs`,
/// or it is the null device (written to nothing).
/// `resolved` receives the path to write (a symbolic link's target, so the
/// link survives the rename).
Status checkOutputTarget(const std::string &path,
                         const std::vector<std::string> &inputs,
                         std::string *resolved = nullptr);

/// One output file being written: bytes go to a temporary file next to the
/// target; commit() flushes it to disk and renames it over the target. An
/// AtomicFile destroyed without a successful commit() removes its
/// temporary and leaves the target as it was.
class AtomicFile {
public:
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  /// Checks the target (checkOutputTarget) and creates the temporary.
  static Expected<std::unique_ptr<AtomicFile>>
  create(const std::string &path, const OutputOptions &options = {});

  /// Appends bytes; a short or failed write is an error naming the target.
  Status write(const void *data, size_t size);
  Status write(std::string_view bytes) {
    return write(bytes.data(), bytes.size());
  }
  /// fsync, set the mode, close and rename over the target.
  Status commit();

  /// The target as given to create().
  const std::string &path() const { return path_; }

private:
  AtomicFile() = default;
  void discard();
  std::string path_;   ///< as given
  std::string target_; ///< symbolic links resolved
  std::string temp_;
  int fd_ = -1;
  unsigned mode_ = 0644;
  bool committed_ = false;
  bool discard_ = false; ///< the target is the null device
};

/// Writes `bytes` to `path` through an AtomicFile.
Status writeFileAtomic(const std::string &path, std::string_view bytes,
                       const OutputOptions &options = {});

} // namespace k3

#endif // K3C_RUNTIME_IO_ATOMICFILE_H
