//===- AtomicFile.cpp - Bounded reads and atomic writes of files ----------===//
//
// POSIX calls rather than iostreams: the checks need the file descriptor
// (fstat on what was actually opened, O_NONBLOCK so that opening a FIFO
// cannot block, fsync before the rename), and errno makes the messages say
// what went wrong.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/AtomicFile.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace k3 {

namespace {

std::string errnoText(int e) { return std::strerror(e); }

/// What a non-regular file is, for messages.
const char *fileKind(mode_t m) {
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISSOCK(m))
    return "a socket";
  return "not a regular file";
}

/// The process umask, read without changing it (umask(2) can only be read
/// by setting it, which races with other threads creating files).
mode_t currentUmask() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  return 022;
}

/// True for the null device (the one /dev/null names, under any name).
bool isNullDevice(const struct stat &st) {
  struct stat null;
  return S_ISCHR(st.st_mode) && ::stat("/dev/null", &null) == 0 &&
         S_ISCHR(null.st_mode) && st.st_rdev == null.st_rdev;
}

/// The folder and the last component of `path`.
void splitPath(const std::string &path, std::string &dir, std::string &base) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    dir = ".";
    base = path;
  } else {
    dir = slash == 0 ? "/" : path.substr(0, slash);
    base = path.substr(slash + 1);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

Status readRegularFile(const std::string &path, uint64_t maxBytes,
                       std::string &out, const char *what) {
  out.clear();
  // O_NONBLOCK: opening a FIFO without a writer returns at once (and is
  // refused below) instead of waiting forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC |
                                          O_NOCTTY);
  if (fd < 0)
    return makeError(path, ": cannot open the ", what, ": ",
                     errnoText(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return makeError(path, ": cannot stat the ", what, ": ", errnoText(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return makeError(path, ": the ", what, " is ", fileKind(st.st_mode),
                     ", not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > maxBytes) {
    ::close(fd);
    return makeError(path, ": the ", what, " is ", size,
                     " bytes, more than the ", maxBytes, " bytes accepted");
  }
  // Read to the end, but never more than the bound: the file may grow.
  out.resize(static_cast<size_t>(size));
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (out.size() > maxBytes)
        break;
      out.resize(std::min<uint64_t>(maxBytes + 1, out.size() + 4096));
      if (have == out.size())
        break;
    }
    const ssize_t n = ::read(fd, &out[have], out.size() - have);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int e = errno;
      ::close(fd);
      out.clear();
      return makeError(path, ": cannot read the ", what, ": ", errnoText(e));
    }
    if (n == 0)
      break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(have);
  if (have > maxBytes) {
    out.clear();
    return makeError(path, ": the ", what, " grew past the ", maxBytes,
                     " bytes accepted while it was read");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

Status checkOutputTarget(const std::string &path,
                         const std::vector<std::string> &inputs,
                         std::string *resolved) {
  if (path.empty())
    return makeError("the output path is empty");
  std::string target = path;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Write through the link so that it survives the rename.
    char *real = ::realpath(path.c_str(), nullptr);
    if (!real)
      return makeError(path, ": the output is a symbolic link that does not "
                             "resolve (",
                       errnoText(errno), ")");
    target = real;
    std::free(real);
  }
  if (::stat(target.c_str(), &st) == 0) {
    // The null device is a sink, not a file to replace: AtomicFile writes
    // nothing to it and never renames over it.
    if (isNullDevice(st)) {
      if (resolved)
        *resolved = target;
      return Status::ok();
    }
    if (!S_ISREG(st.st_mode))
      return makeError(path, ": refusing to replace ", fileKind(st.st_mode),
                       " with the output (give a regular file or a new "
                       "path)");
    for (const std::string &in : inputs) {
      struct stat is;
      if (!in.empty() && ::stat(in.c_str(), &is) == 0 &&
          is.st_dev == st.st_dev && is.st_ino == st.st_ino)
        return makeError(path, ": the output is the input ", in,
                         "; writing it would destroy the input (choose "
                         "another output path)");
    }
  } else if (errno != ENOENT) {
    return makeError(path, ": cannot stat the output: ", errnoText(errno));
  }
  if (resolved)
    *resolved = target;
  return Status::ok();
}

AtomicFile::~AtomicFile() {
  if (!committed_)
    discard();
}

void AtomicFile::discard() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  if (!temp_.empty())
    ::unlink(temp_.c_str());
  temp_.clear();
}

Expected<std::unique_ptr<AtomicFile>>
AtomicFile::create(const std::string &path, const OutputOptions &options) {
  std::unique_ptr<AtomicFile> f(new AtomicFile());
  f->path_ = path;
  K3_RETURN_IF_ERROR(checkOutputTarget(path, options.inputs, &f->target_));
  struct stat st;
  if (::stat(f->target_.c_str(), &st) == 0 && isNullDevice(st)) {
    f->discard_ = true; // `-o /dev/null`: the output is thrown away
    return f;
  }
  std::string dir, base;
  splitPath(f->target_, dir, base);
  if (base.empty())
    return makeError(path, ": the output path names a folder, not a file");
  // Hidden, unique, in the target's folder (a rename stays on one file
  // system); mkstemp creates it 0600, commit() sets the final mode.
  std::string temp = dir + "/." + base + ".tmp-XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0)
    return makeError(path, ": cannot create a temporary file in ", dir, ": ",
                     errnoText(errno));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  f->fd_ = fd;
  f->temp_ = temp;
  f->mode_ = (options.executable ? 0777u : 0666u) & ~currentUmask();
  return f;
}

Status AtomicFile::write(const void *data, size_t size) {
  if (discard_)
    return Status::ok();
  if (fd_ < 0)
    return makeError(path_, ": write after commit or failure");
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min<size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int e = errno;
      discard();
      return makeError(path_, ": write failed: ", errnoText(e));
    }
    if (n == 0) {
      discard();
      return makeError(path_, ": write failed: no progress");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status AtomicFile::commit() {
  if (discard_) {
    committed_ = true;
    return Status::ok();
  }
  if (fd_ < 0)
    return makeError(path_, ": commit after commit or failure");
  auto fail = [&](const char *step) {
    const int e = errno;
    discard();
    return makeError(path_, ": ", step, " failed: ", errnoText(e));
  };
  // Delayed write errors (a full disk, a quota) surface at fsync or close.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    return fail("flushing the output to disk");
  if (::fchmod(fd_, mode_) != 0)
    return fail("setting the output's mode");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    return fail("closing the output");
  // The target may have changed since create(): check again right before
  // the rename, which never follows a link at the target itself.
  Status again = checkOutputTarget(target_, {});
  if (!again) {
    discard();
    return again;
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    return fail("renaming the temporary file over the output");
  temp_.clear();
  committed_ = true;
  return Status::ok();
}

Status writeFileAtomic(const std::string &path, std::string_view bytes,
                       const OutputOptions &options) {
  Expected<std::unique_ptr<AtomicFile>> f = AtomicFile::create(path, options);
  if (!f)
    return f.status();
  K3_RETURN_IF_ERROR((*f)->write(bytes));
  return (*f)->commit();
}

} // namespace k3
