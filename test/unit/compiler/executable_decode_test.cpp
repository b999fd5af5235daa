//===- executable_decode_test.cpp - k3c executables against the reference ===//
//
// The user's path, through the built tools: `k3c MODEL --emit=exe
// --fusion=S -o model`, then `./model --weights MODEL --prompt-ids ...
// --max-new 64 --logits-out l.npy`. The ids it prints and the logits it
// dumps must match the float64 reference: all 64 tokens identical, every
// row within the e2e bound, for every strategy and both tiny presets.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"

#include "runtime/io/Npy.h"

#include <sys/wait.h>

#include <cstdio>
#include <sstream>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 64;
constexpr double kLogitsTol = 2e-2;

/// Runs `cmd` with stderr to `errFile`; returns the exit code and stdout.
int runCommand(const std::string &cmd, const std::string &errFile,
               std::string &out) {
  std::FILE *p = ::popen((cmd + " 2>" + errFile).c_str(), "r");
  if (!p)
    return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    out.append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Param = std::tuple<std::string, std::string>;
class ExecutableDecode : public ::testing::TestWithParam<Param> {};

TEST_P(ExecutableDecode, MatchesReference) {
  auto [preset, strategy] = GetParam();
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/7);
  const std::string base = dir + "-" + strategy;
  const std::string exe = base + ".exe", npy = base + ".npy",
                    err = base + ".err";

  std::string out;
  int rc = runCommand(std::string(K3C_PATH) + " " + dir + " --emit=exe" +
                          " --fusion=" + strategy + " --max-seq 128 -o " + exe,
                      err, out);
  ASSERT_EQ(rc, 0) << "k3c failed: " << readAll(err);

  std::string ids;
  for (size_t i = 0; i < kPrompt.size(); ++i)
    ids += (i ? "," : "") + std::to_string(kPrompt[i]);
  out.clear();
  rc = runCommand(exe + " --weights " + dir + " --prompt-ids " + ids +
                      " --max-new " + std::to_string(kMaxNew) +
                      " --logits-out " + npy,
                  err, out);
  ASSERT_EQ(rc, 0) << "the executable failed: " << readAll(err);
  std::vector<int64_t> tokens;
  std::istringstream ts(out);
  for (int64_t t; ts >> t;)
    tokens.push_back(t);
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kMaxNew)) << out;
  ::k3::Expected<::k3::NpyF32> logits = ::k3::readNpyF32(npy);
  ASSERT_TRUE(logits.hasValue()) << logits.message();
  ASSERT_EQ(logits->rows, kMaxNew);

  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  ::k3::ref::RefDecode r;
  ASSERT_NO_FATAL_FAILURE(
      k3test::referenceDecode(*config, dir, kPrompt, kMaxNew, r));
  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  ::k3::ref::DecodeCompareResult cmp = ::k3::ref::compareDecode(
      r.tokens, r.logits, tokens,
      ::k3::ref::logitRowsFromFlat(logits->values, logits->cols), opt);
  std::cout << "[exe] " << preset << "/" << strategy << ": " << cmp.diagnostic;
  EXPECT_TRUE(cmp.ok) << cmp.diagnostic;
  EXPECT_EQ(cmp.rowsCompared, kMaxNew);
  EXPECT_NE(readAll(err).find("tokens/s"), std::string::npos);
  std::remove(exe.c_str());
  std::remove(npy.c_str());
  std::remove(err.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Presets, ExecutableDecode,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear", "tiny-odd"),
                       ::testing::Values("none", "default", "max")),
    k3test::paramName);

} // namespace
