//===- ModelMaker_test.cpp - Synthetic checkpoints ------------------------===//
//
// Determinism (same seed → same bytes, independent of layer count,
// sharding and thread count; pinned to the bytes the serial maker wrote),
// MXFP4 expert layout, value ranges that keep activations sane, and the
// sharded form.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Tensors.h"
#include "runtime/model/Presets.h"

#include "kernels/common/BF16.h"
#include "kernels/common/MXFP4.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

using namespace k3;

namespace {

ModelConfig preset(const std::string &name, int64_t layers = 0) {
  Expected<ModelConfig> c = presetConfig(name, layers);
  EXPECT_TRUE(c) << c.message();
  return *c;
}

std::vector<float> bf16Values(const TensorView &t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = bf16ToFloat(t.as<bf16_t>()[i]);
  return out;
}

double rms(const std::vector<float> &v) {
  double s = 0;
  for (float x : v)
    s += double(x) * x;
  return std::sqrt(s / v.size());
}

bool sameBytes(const TensorView *a, const TensorView *b) {
  return a && b && a->nbytes == b->nbytes &&
         std::memcmp(a->data, b->data, a->nbytes) == 0;
}

/// Every file of a model directory, by name.
std::map<std::string, std::string> dirFiles(const std::string &dir) {
  std::map<std::string, std::string> files;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    files[e.path().filename().string()] = test::readFile(e.path().string());
  return files;
}

uint64_t fnv1a(const std::string &bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

} // namespace

TEST(ModelMaker, SameSeedSameBytes) {
  ModelConfig c = preset("tiny");
  test::TempDir a, b, d;
  ASSERT_TRUE(makeModel(c, 42, a.path()));
  ASSERT_TRUE(makeModel(c, 42, b.path()));
  ASSERT_TRUE(makeModel(c, 43, d.path()));
  std::string fa = test::readFile(a.file("model.safetensors"));
  std::string fb = test::readFile(b.file("model.safetensors"));
  std::string fd = test::readFile(d.file("model.safetensors"));
  ASSERT_FALSE(fa.empty());
  EXPECT_TRUE(fa == fb) << "same seed gave different bytes";
  EXPECT_EQ(fa.size(), fd.size());
  EXPECT_FALSE(fa == fd) << "different seeds gave the same bytes";
  EXPECT_EQ(test::readFile(a.file("config.json")),
            test::readFile(d.file("config.json")));

  // Every tensor differs between seeds, not just some.
  Expected<TensorStore> sa = TensorStore::open(a.path());
  Expected<TensorStore> sd = TensorStore::open(d.path());
  ASSERT_TRUE(sa && sd);
  for (const TensorView *t : sa->all())
    EXPECT_FALSE(sameBytes(t, sd->find(t->name))) << t->name;
}

TEST(ModelMaker, ValuesDependOnlyOnSeedAndName) {
  // Fewer layers: the tensors both models share are byte-identical.
  test::TempDir eight, four;
  ASSERT_TRUE(makeModel(preset("tiny"), 7, eight.path()));
  ASSERT_TRUE(makeModel(preset("tiny", 4), 7, four.path()));
  Expected<TensorStore> s8 = TensorStore::open(eight.path());
  Expected<TensorStore> s4 = TensorStore::open(four.path());
  ASSERT_TRUE(s8 && s4);
  int shared = 0;
  for (const TensorView *t : s4->all()) {
    const TensorView *u = s8->find(t->name);
    if (!u)
      continue;
    ++shared;
    EXPECT_TRUE(sameBytes(t, u)) << t->name;
  }
  EXPECT_GT(shared, 100);
}

TEST(ModelMaker, ShardedMatchesSingleFile) {
  ModelConfig c = preset("tiny-linear");
  test::TempDir single, sharded;
  ASSERT_TRUE(makeModel(c, 5, single.path()));
  uint64_t lastDone = 0, lastTotal = 0;
  int calls = 0;
  auto progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, lastDone);
    lastDone = done;
    lastTotal = total;
    ++calls;
  };
  ASSERT_TRUE(makeModel(c, 5, sharded.path(), progress, 2 << 20));
  EXPECT_GT(calls, 10);
  EXPECT_EQ(lastDone, lastTotal);

  std::string indexText =
      test::readFile(sharded.file("model.safetensors.index.json"));
  ASSERT_FALSE(indexText.empty());
  nlohmann::json index = nlohmann::json::parse(indexText);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), lastTotal);
  std::set<std::string> shards;
  for (auto &[name, file] : index["weight_map"].items())
    shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 3u);
  char first[64];
  std::snprintf(first, sizeof(first), "model-00001-of-%05zu.safetensors",
                shards.size());
  EXPECT_TRUE(shards.count(first)) << first;
  EXPECT_FALSE(std::filesystem::exists(sharded.file("model.safetensors")));
  for (const std::string &f : shards) {
    // No shard exceeds the limit by more than one oversized tensor.
    auto size = std::filesystem::file_size(sharded.file(f));
    EXPECT_LT(size, (2u << 20) + (1u << 20)) << f;
  }

  Expected<TensorStore> s1 = TensorStore::open(single.path());
  Expected<TensorStore> s2 = TensorStore::open(sharded.path());
  ASSERT_TRUE(s1) << s1.message();
  ASSERT_TRUE(s2) << s2.message();
  ASSERT_EQ(s1->size(), s2->size());
  for (const TensorView *t : s1->all())
    EXPECT_TRUE(sameBytes(t, s2->find(t->name))) << t->name;
  EXPECT_TRUE(bindModelWeights(c, *s2));

  // Writing single-file into the sharded directory replaces the shards.
  ASSERT_TRUE(makeModel(c, 5, sharded.path()));
  EXPECT_FALSE(
      std::filesystem::exists(sharded.file("model.safetensors.index.json")));
  Expected<TensorStore> s3 = TensorStore::open(sharded.path());
  ASSERT_TRUE(s3) << s3.message();
  EXPECT_EQ(s3->size(), s1->size());
}

TEST(ModelMaker, Mxfp4ExpertsHaveTheRightLayout) {
  ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 9, dir.path()));
  Expected<TensorStore> s = TensorStore::open(dir.path());
  ASSERT_TRUE(s);
  for (TensorId id :
       {TensorId::ExpertW1, TensorId::ExpertW2, TensorId::ExpertW3}) {
    const std::string e = tensorBaseName(c, id, 2, 5);
    const std::string w = e.substr(e.size() - 2);
    const TensorView *packed = s->find(e + ".weight_packed");
    const TensorView *scale = s->find(e + ".weight_scale");
    ASSERT_NE(packed, nullptr) << w;
    ASSERT_NE(scale, nullptr) << w;
    EXPECT_EQ(s->find(tensorName(c, id, 2, 5)), nullptr);
    EXPECT_EQ(packed->dtype, DType::U8);
    EXPECT_EQ(scale->dtype, DType::U8);
    EXPECT_EQ(packed->shape, (std::vector<int64_t>{128, 64}));
    EXPECT_EQ(scale->shape, (std::vector<int64_t>{128, 4}));
    // Dequantised values are finite, non-trivial, and about the std asked.
    std::vector<float> values(128 * 128), row(128);
    for (int64_t r = 0; r < 128; ++r) {
      dequantMxfp4Row(packed->as<uint8_t>(), scale->as<uint8_t>(), 128, r,
                      row.data());
      std::copy(row.begin(), row.end(), values.begin() + r * 128);
    }
    for (float v : values)
      ASSERT_TRUE(std::isfinite(v));
    double want = (id == TensorId::ExpertW2 ? 0.06 : 1.0) / std::sqrt(128.0);
    EXPECT_NEAR(rms(values), want, 0.25 * want) << w;
  }
}

TEST(ModelMaker, ValueScales) {
  ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 11, dir.path()));
  Expected<TensorStore> s = TensorStore::open(dir.path());
  ASSERT_TRUE(s);
  auto find = [&](TensorId id, int64_t layer = -1) {
    const TensorView *t = s->find(tensorName(c, id, layer));
    EXPECT_NE(t, nullptr) << tensorName(c, id, layer);
    return t;
  };
  const int64_t D = 256, V = 1024, E = 16, K = 4;
  // Embeddings: std 1, except the planted routing code (columns 0..E-1:
  // +5 on exactly top-k of them, -5 on the rest) and the AttnRes marker
  // (column E: +4 for every token).
  std::vector<float> emb = bf16Values(*find(TensorId::EmbedTokens));
  std::vector<float> plain;
  for (int64_t t = 0; t < V; ++t) {
    const float *row = emb.data() + t * D;
    int64_t ones = 0;
    for (int64_t e = 0; e < E; ++e) {
      ASSERT_TRUE(row[e] == 5.0f || row[e] == -5.0f) << t << " " << e;
      ones += row[e] > 0;
    }
    EXPECT_EQ(ones, K) << "token " << t;
    EXPECT_EQ(row[E], 4.0f);
    plain.insert(plain.end(), row + E + 1, row + D);
  }
  EXPECT_NEAR(rms(plain), 1.0, 0.05);
  for (float v : bf16Values(*find(TensorId::InputLayernorm, 2))) {
    EXPECT_GE(v, 0.89f);
    EXPECT_LE(v, 1.11f);
  }
  EXPECT_NEAR(rms(bf16Values(*find(TensorId::KdaQProj, 2))), 1.0 / 16, 0.01);
  EXPECT_NEAR(rms(bf16Values(*find(TensorId::KdaOProj, 2))), 1.0 / 16, 0.01);
  // Routers: std 2/sqrt(D), plus one boost of 16 per expert row at a code
  // column; the boosted columns are a permutation, different per layer.
  std::vector<std::vector<int64_t>> perms;
  for (int64_t layer : {2, 5}) {
    std::vector<float> gate = bf16Values(*find(TensorId::MoeGate, layer));
    std::vector<float> rest;
    std::vector<int64_t> perm;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t d = 0; d < D; ++d) {
        float v = gate[e * D + d];
        if (v > 8.0f) {
          EXPECT_LT(d, E) << "boost outside the code columns";
          perm.push_back(d);
        } else {
          rest.push_back(v);
        }
      }
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.size(), static_cast<size_t>(E)) << layer;
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(sorted[e], e) << layer;
    EXPECT_NEAR(rms(rest), 2.0 / 16, 0.02);
    perms.push_back(perm);
  }
  EXPECT_NE(perms[0], perms[1]) << "every router should route its own way";
  // AttnRes projections: std 0.5/sqrt(D) plus 0.7 at the marker column.
  std::vector<float> ar = bf16Values(*find(TensorId::MlpResProj, 2));
  EXPECT_NEAR(ar[E], 0.7, 0.15);
  ar.erase(ar.begin() + E);
  EXPECT_NEAR(rms(ar), 0.5 / 16, 0.01);
  // lm_head: a planted bigram. The row most aligned with token t's plain
  // embedding is a different row for every t (a permutation), and its lead
  // over the runner-up is large.
  std::vector<float> head = bf16Values(*find(TensorId::LmHead));
  std::vector<int64_t> best(V);
  double minLead = 1e300;
  for (int64_t t = 0; t < V; ++t) {
    double a = -1e300, b = -1e300;
    for (int64_t j = 0; j < V; ++j) {
      double dot = 0;
      for (int64_t d = E + 1; d < D; ++d)
        dot += static_cast<double>(head[j * D + d]) * emb[t * D + d];
      if (dot > a) {
        b = a;
        a = dot;
        best[t] = j;
      } else if (dot > b) {
        b = dot;
      }
    }
    minLead = std::min(minLead, a - b);
  }
  std::sort(best.begin(), best.end());
  EXPECT_EQ(std::unique(best.begin(), best.end()) - best.begin(), V);
  EXPECT_GT(minLead, 50.0);

  // A_log: log(U[1, 16]) for the real heads, zero padding to 128.
  const TensorView *aLog = find(TensorId::KdaALog, 2);
  ASSERT_NE(aLog, nullptr);
  for (int64_t i = 0; i < aLog->numel(); ++i) {
    float v = aLog->as<float>()[i];
    if (i < c.kda.numHeads) {
      EXPECT_GE(v, 0.0f);
      EXPECT_LE(v, std::log(16.0f));
    } else {
      EXPECT_EQ(v, 0.0f);
    }
  }
  const TensorView *bias = find(TensorId::MoeGateBias, 2);
  ASSERT_NE(bias, nullptr);
  bool nonZero = false;
  for (int64_t i = 0; i < bias->numel(); ++i) {
    EXPECT_LT(std::fabs(bias->as<float>()[i]), 0.2f);
    nonZero |= bias->as<float>()[i] != 0.0f;
  }
  EXPECT_TRUE(nonZero);
}

TEST(ModelMaker, WritesAParsableConfig) {
  ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 1, dir.path()));
  Expected<ModelConfig> back = parseConfigFile(dir.file("config.json"));
  ASSERT_TRUE(back) << back.message();
  EXPECT_TRUE(*back == c);
}

TEST(ModelMaker, RejectsInvalidConfigAndBadDirectory) {
  ModelConfig c = preset("tiny");
  c.numExpertsPerToken = 99;
  test::TempDir dir;
  EXPECT_ERROR_CONTAINS(makeModel(c, 1, dir.path()), "num_experts_per_token");
  test::writeFile(dir.file("file"), "x");
  EXPECT_ERROR_CONTAINS(makeModel(preset("tiny"), 1, dir.file("file")),
                        "cannot create the output directory");
}

TEST(ModelMaker, ThreadCountDoesNotChangeBytes) {
  // Tensors are cut into about one piece per thread (at least 2^14 values),
  // so 3 and 4 threads start pieces mid-row in the embedding, lm_head and
  // the projections (tiny-odd's sizes are all distinct and odd-ish), and the
  // sharded model spreads pieces over several files.
  struct Case {
    const char *preset;
    int64_t shardBytes;
  };
  for (Case c : {Case{"tiny", 0}, Case{"tiny-odd", 0},
                 Case{"tiny-linear", 1 << 20}, Case{"tiny", 1 << 20}}) {
    SCOPED_TRACE(std::string(c.preset) + " shard " +
                 std::to_string(c.shardBytes));
    ModelConfig config = preset(c.preset);
    test::TempDir serial;
    ASSERT_TRUE(makeModel(config, 21, serial.path(), {}, c.shardBytes,
                          Structure::Planted, 1));
    std::map<std::string, std::string> want = dirFiles(serial.path());
    ASSERT_GE(want.size(), c.shardBytes ? 4u : 2u);
    for (int threads : {4, 3}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      test::TempDir dir;
      uint64_t last = 0, total = 0;
      int calls = 0;
      bool monotonic = true;
      auto progress = [&](uint64_t done, uint64_t all) {
        monotonic &= done >= last && (calls == 0 || all == total);
        last = done;
        total = all;
        ++calls;
      };
      ASSERT_TRUE(makeModel(config, 21, dir.path(), progress, c.shardBytes,
                            Structure::Planted, threads));
      std::map<std::string, std::string> got = dirFiles(dir.path());
      ASSERT_EQ(got.size(), want.size());
      for (const auto &[name, bytes] : want) {
        ASSERT_TRUE(got.count(name)) << name;
        EXPECT_TRUE(got[name] == bytes) << name << " differs";
      }
      EXPECT_TRUE(monotonic);
      EXPECT_GT(calls, 10);
      EXPECT_EQ(last, total);
    }
  }
  // Random structure too (the same streams, without the plant).
  test::TempDir a, b;
  ASSERT_TRUE(
      makeModel(preset("tiny-odd"), 4, a.path(), {}, 0, Structure::Random, 1));
  ASSERT_TRUE(
      makeModel(preset("tiny-odd"), 4, b.path(), {}, 0, Structure::Random, 4));
  EXPECT_TRUE(dirFiles(a.path()) == dirFiles(b.path()));
}

TEST(ModelMaker, BytesArePinned) {
  // FNV-1a of model.safetensors as the serial, one-tensor-at-a-time maker
  // wrote it (before the pieces and threads): parallel generation must not
  // change a byte. If the generator is changed on purpose (new scales, a
  // new plant), these change with it: update them in the same commit.
  struct Case {
    const char *preset;
    uint64_t hash;
  };
  for (Case c : {Case{"tiny", 0xb1882d172272d8e0ull},
                 Case{"tiny-odd", 0x8654ba1d84c10ad4ull},
                 Case{"tiny-linear", 0x2684f92cbf0b0958ull}}) {
    for (int threads : {1, 4}) {
      test::TempDir dir;
      ASSERT_TRUE(makeModel(preset(c.preset), 42, dir.path(), {}, 0,
                            Structure::Planted, threads));
      EXPECT_EQ(fnv1a(test::readFile(dir.file("model.safetensors"))), c.hash)
          << c.preset << " with " << threads << " threads";
    }
  }
}

TEST(ModelMaker, DefaultThreads) {
  int n = defaultMakerThreads();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, kMaxMakerThreads);
}
