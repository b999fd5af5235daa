//===- MkModelTool_test.cpp - The k3-mkmodel command line -----------------===//
//
// Runs the built tool: help, the preset list, exit codes for bad command
// lines (--threads included), a real (tiny) write, the same files for any
// --threads, and the stored dtypes of --real-dtypes / --simple-dtypes.
//
//===----------------------------------------------------------------------===//
#include "test/unit/TestUtil.h"
#include "runtime/model/Config.h"
#include "runtime/io/Safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sys/wait.h>

#ifndef K3C_MKMODEL_PATH
#error "K3C_MKMODEL_PATH must name the k3-mkmodel binary"
#endif

namespace {

struct ToolRun {
  int code = -1;
  std::string output; ///< stdout and stderr together
};

ToolRun runTool(const std::string &args) {
  ToolRun r;
  std::string cmd = std::string("'") + K3C_MKMODEL_PATH + "' " + args + " 2>&1";
  std::FILE *p = popen(cmd.c_str(), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    r.output.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

} // namespace

TEST(MkModelTool, Help) {
  ToolRun r = runTool("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(k3::test::contains(r.output, "usage: k3-mkmodel PRESET -o DIR"));
  EXPECT_TRUE(k3::test::contains(r.output, "--shard-mb"));
  EXPECT_TRUE(k3::test::contains(r.output, "--threads N"));
  EXPECT_TRUE(k3::test::contains(r.output, "byte-identical files"));
}

TEST(MkModelTool, List) {
  ToolRun r = runTool("--list");
  EXPECT_EQ(r.code, 0);
  for (const char *p : {"tiny", "tiny-linear", "k3", "kimi-linear-48b"})
    EXPECT_TRUE(k3::test::contains(r.output, p)) << r.output;
}

TEST(MkModelTool, BadCommandLines) {
  k3::test::TempDir dir;
  ToolRun r = runTool("k4 -o '" + dir.path() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "unknown preset 'k4'")) << r.output;
  EXPECT_TRUE(k3::test::contains(r.output, "kimi-linear-48b")) << r.output;

  r = runTool("tiny");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "-o DIR")) << r.output;

  r = runTool("-o '" + dir.path() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "no PRESET")) << r.output;

  r = runTool("tiny -o '" + dir.path() + "' --seed abc");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "'abc' is not")) << r.output;

  r = runTool("tiny -o '" + dir.path() + "' --layers 0");
  EXPECT_EQ(r.code, 2);
  r = runTool("tiny -o '" + dir.path() + "' --frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "unknown option '--frobnicate'"));
  r = runTool("tiny -o '" + dir.path() + "' --seed");
  EXPECT_EQ(r.code, 2);

  // --threads: at least 1, a number, not absurd; nothing is written.
  std::string out = dir.file("never");
  r = runTool("tiny -o '" + out + "' --threads 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "--threads must be at least 1"))
      << r.output;
  for (const char *bad : {"abc", "-1", "4x", "''"}) {
    r = runTool("tiny -o '" + out + "' --threads " + bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_TRUE(k3::test::contains(r.output, "is not a non-negative integer"))
        << bad << ": " << r.output;
  }
  r = runTool("tiny -o '" + out + "' --threads 100000");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "--threads must be at most"))
      << r.output;
  r = runTool("tiny -o '" + out + "' --threads");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(k3::test::contains(r.output, "--threads needs a value"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(MkModelTool, ThreadsGiveTheSameFiles) {
  // A sharded model with one thread and with four: the same files, byte for
  // byte; the final line reports the rate and the thread count.
  k3::test::TempDir dir;
  std::map<std::string, std::string> files[2];
  int i = 0;
  for (const char *threads : {"1", "4"}) {
    std::string out = dir.file(std::string("t") + threads);
    ToolRun r = runTool("tiny -o '" + out + "' --seed 5 --shard-mb 1 " +
                        "--threads " + threads);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(k3::test::contains(r.output, "100%")) << r.output;
    EXPECT_TRUE(k3::test::contains(r.output, std::string("MiB/s, ") + threads +
                                                 " threads"))
        << r.output;
    for (const auto &e : std::filesystem::directory_iterator(out))
      files[i][e.path().filename().string()] =
          k3::test::readFile(e.path().string());
    ++i;
  }
  EXPECT_GT(files[0].size(), 4u);
  EXPECT_TRUE(files[0] == files[1]);
}

TEST(MkModelTool, WritesTinyModel) {
  k3::test::TempDir dir;
  std::string out = dir.file("m");
  ToolRun r = runTool("tiny-linear -o '" + out +
                      "' --seed 3 --layers 2 "
                      "--experts 4 --shard-mb 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(k3::test::contains(r.output, "100%")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
  EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors.index.json"));

  // A file where the directory should be: an error while writing (exit 1).
  k3::test::writeFile(dir.file("f"), "x");
  r = runTool("tiny -o '" + dir.file("f") + "'");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(k3::test::contains(r.output, "error")) << r.output;
}

TEST(MkModelTool, StoredDtypes) {
  // tiny (kimi_k3 form): conv filters and o_norm BF16 by default, F32 with
  // --real-dtypes (as the published K3); tiny-linear: the router bias BF16
  // with --real-dtypes (as Kimi-Linear). --simple-dtypes is the tiny default.
  k3::test::TempDir dir;
  const std::string conv =
      "language_model.model.layers.0.self_attn.q_conv1d.weight";
  const std::string onorm =
      "language_model.model.layers.0.self_attn.o_norm.weight";
  const std::string bias =
      "model.layers.1.block_sparse_moe.gate.e_score_correction_bias";
  struct Case {
    const char *args, *name, *line;
    const std::string *tensor;
    k3::DType dtype;
  };
  for (const Case &c :
       {Case{"tiny", "a", "simple dtypes", &conv, k3::DType::BF16},
        Case{"tiny --simple-dtypes", "b", "simple dtypes", &onorm,
             k3::DType::BF16},
        Case{"tiny --real-dtypes", "c", "published dtypes", &conv,
             k3::DType::F32},
        Case{"tiny --real-dtypes", "d", "published dtypes", &onorm,
             k3::DType::F32},
        Case{"tiny-linear --layers 2 --experts 4", "e", "simple dtypes", &bias,
             k3::DType::F32},
        Case{"tiny-linear --layers 2 --experts 4 --real-dtypes", "f",
             "published dtypes", &bias, k3::DType::BF16}}) {
    SCOPED_TRACE(c.args);
    const std::string out = dir.file(c.name);
    ToolRun r = runTool(std::string(c.args) + " -o '" + out + "' --seed 2");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(k3::test::contains(r.output, c.line)) << r.output;
    k3::Expected<k3::TensorStore> store = k3::TensorStore::open(out);
    ASSERT_TRUE(store.hasValue()) << store.message();
    const k3::TensorView *t = store->find(*c.tensor);
    ASSERT_NE(t, nullptr) << *c.tensor;
    EXPECT_EQ(t->dtype, c.dtype) << *c.tensor;
  }
  ToolRun help = runTool("--help");
  EXPECT_TRUE(k3::test::contains(help.output, "--real-dtypes")) << help.output;
}

TEST(MkModelTool, ConfigOnly) {
  k3::test::TempDir dir;
  std::string out = dir.file("k3cut");
  // The real K3 geometry cut to 4 layers: only config.json, no 10 GB of
  // weights, and it parses back to that geometry.
  ToolRun r =
      runTool("k3 -o '" + out + "' --layers 4 --experts 32 --config-only");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(k3::test::contains(r.output, "no weights")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  k3::Expected<k3::ModelConfig> c = k3::parseConfigFile(out + "/config.json");
  ASSERT_TRUE(c.hasValue()) << c.message();
  EXPECT_EQ(c->numLayers, 4);
  EXPECT_EQ(c->numExperts, 32);
  EXPECT_EQ(c->hiddenSize, 7168);
}
