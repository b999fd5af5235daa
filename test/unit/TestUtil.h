//===- TestUtil.h - Helpers shared by the runtime unit tests ----*- C++ -*-===//
//
// Temporary directories that clean up after themselves, and whole-file
// reads/writes for building crafted inputs.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_RUNTIME_TESTUTIL_H
#define K3C_TEST_UNIT_RUNTIME_TESTUTIL_H

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace k3::test {

/// A fresh directory under $TMPDIR, removed with everything in it when the
/// object goes away.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "k3c-rt-XXXXXX").string();
    char *made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::string &path() const { return path_; }
  /// `path()/name`.
  std::string file(const std::string &name) const {
    return (std::filesystem::path(path_) / name).string();
  }

private:
  std::string path_;
};

/// The whole file as bytes ("" when it cannot be read).
inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

/// What a command run by runCommand printed and how it ended.
struct RunResult {
  int exitCode = -1; ///< -1: did not start, or ended by a signal
  std::string out, err;
};

/// Runs `cmd` with /bin/sh, its stdout captured and its stderr in
/// `dir`/stderr.txt (read back into err): the tool tests' one way of running
/// the built binaries.
inline RunResult runCommand(const std::string &cmd, const TempDir &dir) {
  const std::string errFile = dir.file("stderr.txt");
  RunResult r;
  std::FILE *p = ::popen((cmd + " 2>" + errFile).c_str(), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = readFile(errFile);
  return r;
}

/// True when `haystack` contains `needle`; for EXPECT_PRED2-style messages.
inline bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

} // namespace k3::test

/// Expects `expr` (a Status or Expected) to fail with a message containing
/// `needle`.
#define EXPECT_ERROR_CONTAINS(expr, needle)                                    \
  do {                                                                         \
    auto &&k3_result_ = (expr);                                                \
    ASSERT_FALSE(static_cast<bool>(k3_result_)) << "expected an error";        \
    EXPECT_TRUE(::k3::test::contains(k3_result_.message(), needle))            \
        << "message: " << k3_result_.message() << "\nwanted: " << needle;      \
  } while (0)

#endif // K3C_TEST_UNIT_RUNTIME_TESTUTIL_H
