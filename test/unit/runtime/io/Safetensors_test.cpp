//===- Safetensors_test.cpp - safetensors files, stores and bad input -----===//
//
// Round trips through the writer and reader, the directory forms of a
// TensorStore, and one test per class of malformed file: each crafted file
// must give an error naming the problem, without reading outside the
// mapping (run under ASan to check the latter).
//
//===----------------------------------------------------------------------===//
#include "runtime/io/Safetensors.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

using namespace k3;
using json = nlohmann::json;

namespace {

TensorData makeTensor(const std::string &name, DType dtype,
                      std::vector<int64_t> shape, uint8_t fill) {
  TensorData t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  uint64_t n = *tensorByteSize(dtype, t.shape);
  t.bytes.resize(n);
  for (uint64_t i = 0; i < n; ++i)
    t.bytes[i] = static_cast<uint8_t>(fill + i);
  return t;
}

/// A file made of an 8-byte length (`length`, or the header's own size),
/// the header text and `data`.
std::string craft(const std::string &header, const std::string &data,
                  uint64_t length = UINT64_MAX - 1) {
  uint64_t n = length == UINT64_MAX - 1 ? header.size() : length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

/// Writes `bytes` to a file in `dir` and expects opening it to fail with a
/// message containing `needle`.
void expectBadFile(const test::TempDir &dir, const std::string &bytes,
                   const std::string &needle) {
  std::string path = dir.file("bad.safetensors");
  test::writeFile(path, bytes);
  Expected<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f) << "expected an error mentioning " << needle;
  EXPECT_TRUE(test::contains(f.message(), needle))
      << "message: " << f.message() << "\nwanted: " << needle;
  EXPECT_TRUE(test::contains(f.message(), "bad.safetensors")) << f.message();
}

} // namespace

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST(Safetensors, RoundTrip) {
  test::TempDir dir;
  std::vector<TensorData> tensors = {
      makeTensor("a.weight", DType::BF16, {4, 6}, 1),
      makeTensor("b.bias", DType::F32, {5}, 7),
      makeTensor("c.packed", DType::U8, {3, 3}, 9),
      makeTensor("empty", DType::F32, {0, 4}, 0),
      makeTensor("scalar", DType::I64, {}, 3),
  };
  std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(writeSafetensors(path, tensors, {{"format", "pt"}}));

  // Header length is a multiple of 8 so the data section is aligned.
  std::string raw = test::readFile(path);
  uint64_t headerLen = 0;
  std::memcpy(&headerLen, raw.data(), 8);
  EXPECT_EQ((8 + headerLen) % 8, 0u);

  Expected<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ((*f)->tensors().size(), tensors.size());
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  for (const TensorData &t : tensors) {
    const TensorView *v = (*f)->find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(v->dtype, t.dtype);
    EXPECT_EQ(v->shape, t.shape);
    EXPECT_EQ(v->nbytes, t.bytes.size());
    if (!t.bytes.empty()) { // memcmp may not be given a null pointer
      EXPECT_EQ(std::memcmp(v->data, t.bytes.data(), t.bytes.size()), 0);
    }
  }
  EXPECT_EQ((*f)->find("nope"), nullptr);
  EXPECT_EQ((*f)->find("scalar")->numel(), 1);
  // File order is the writer's order (empty tensors aside).
  EXPECT_EQ((*f)->tensors()[0].name, "a.weight");
  // The first tensor starts at the aligned data section.
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->tensors()[0].data) % 8, 0u);

  // The header is the standard one: a JSON object with the three fields.
  json header = json::parse(raw.substr(8, headerLen));
  EXPECT_EQ(header["b.bias"]["dtype"], "F32");
  EXPECT_EQ(header["b.bias"]["data_offsets"], json::array({48, 68}));
}

TEST(Safetensors, StreamingWriterChecksSizes) {
  test::TempDir dir;
  std::string path = dir.file("s.safetensors");
  std::vector<TensorSpec> specs = {
      {"x", DType::F32, {4}}, {"e", DType::BF16, {0}}, {"y", DType::BF16, {3}}};
  {
    auto w = SafetensorsWriter::create(path, specs);
    ASSERT_TRUE(w) << w.message();
    float x[4] = {1, 2, 3, 4};
    EXPECT_ERROR_CONTAINS((*w)->writeNext(x, 8), "needs 16 bytes, got 8");
    // Appending in pieces across the tensor boundary works.
    uint8_t bytes[22] = {};
    std::memcpy(bytes, x, 16);
    ASSERT_TRUE((*w)->append(bytes, 10));
    ASSERT_TRUE((*w)->append(bytes + 10, 12));
    EXPECT_ERROR_CONTAINS((*w)->append(bytes, 1), "past the last tensor");
    ASSERT_TRUE((*w)->finish());
    EXPECT_EQ((*w)->fileSize(), test::readFile(path).size());
  }
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f) << f.message();
  EXPECT_EQ((*f)->find("x")->as<float>()[3], 4.0f);
  EXPECT_EQ((*f)->find("e")->nbytes, 0u);

  // An unfinished file is removed rather than left truncated.
  {
    auto w = SafetensorsWriter::create(path, specs);
    ASSERT_TRUE(w);
    float x[4] = {};
    ASSERT_TRUE((*w)->writeNext(x, 16));
    EXPECT_ERROR_CONTAINS((*w)->finish(), "only 2 of 3 tensors");
  }
  EXPECT_FALSE(std::filesystem::exists(path));

  EXPECT_ERROR_CONTAINS(
      SafetensorsWriter::create(
          path, {{"x", DType::F32, {1}}, {"x", DType::F32, {1}}}),
      "used twice");
  EXPECT_ERROR_CONTAINS(
      SafetensorsWriter::create(path, {{"x", DType::F32, {-1}}}),
      "negative dimension");
}

//===----------------------------------------------------------------------===//
// Stores
//===----------------------------------------------------------------------===//

TEST(TensorStore, SingleFileAndDirectory) {
  test::TempDir dir;
  ASSERT_TRUE(writeSafetensors(dir.file("model.safetensors"),
                               {makeTensor("a", DType::F32, {2}, 0)}));
  // A stray file is ignored when model.safetensors exists.
  ASSERT_TRUE(writeSafetensors(dir.file("other.safetensors"),
                               {makeTensor("a", DType::F32, {2}, 0)}));
  Expected<TensorStore> s = TensorStore::open(dir.path());
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->size(), 1u);
  ASSERT_NE(s->find("a"), nullptr);
  EXPECT_EQ(s->all().size(), 1u);

  Expected<TensorStore> one = TensorStore::open(dir.file("other.safetensors"));
  ASSERT_TRUE(one) << one.message();
  EXPECT_NE(one->find("a"), nullptr);
}

TEST(TensorStore, AllSafetensorsFiles) {
  test::TempDir dir;
  ASSERT_TRUE(writeSafetensors(dir.file("b.safetensors"),
                               {makeTensor("y", DType::F32, {2}, 0)}));
  ASSERT_TRUE(writeSafetensors(dir.file("a.safetensors"),
                               {makeTensor("x", DType::F32, {2}, 0)}));
  Expected<TensorStore> s = TensorStore::open(dir.path());
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->size(), 2u);
  EXPECT_NE(s->find("x"), nullptr);
  EXPECT_NE(s->find("y"), nullptr);

  // The same name in two files is an error naming both files.
  ASSERT_TRUE(writeSafetensors(dir.file("c.safetensors"),
                               {makeTensor("x", DType::F32, {2}, 0)}));
  Expected<TensorStore> dup = TensorStore::open(dir.path());
  ASSERT_FALSE(dup);
  EXPECT_TRUE(test::contains(dup.message(), "tensor 'x' appears in both"))
      << dup.message();
  EXPECT_TRUE(test::contains(dup.message(), "c.safetensors")) << dup.message();
}

TEST(TensorStore, ShardedIndex) {
  test::TempDir dir;
  ASSERT_TRUE(writeSafetensors(dir.file("model-00001-of-00002.safetensors"),
                               {makeTensor("x", DType::F32, {2}, 0),
                                makeTensor("y", DType::BF16, {3}, 5)}));
  ASSERT_TRUE(writeSafetensors(dir.file("model-00002-of-00002.safetensors"),
                               {makeTensor("z", DType::U8, {4}, 9)}));
  json index = {{"metadata", {{"total_size", 18}}},
                {"weight_map",
                 {{"x", "model-00001-of-00002.safetensors"},
                  {"y", "model-00001-of-00002.safetensors"},
                  {"z", "model-00002-of-00002.safetensors"}}}};
  test::writeFile(dir.file("model.safetensors.index.json"), index.dump());
  Expected<TensorStore> s = TensorStore::open(dir.path());
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->size(), 3u);
  ASSERT_NE(s->find("z"), nullptr);
  EXPECT_EQ(s->find("z")->as<uint8_t>()[1], 10);

  // A tensor the index places in the wrong shard.
  json wrong = index;
  wrong["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  test::writeFile(dir.file("model.safetensors.index.json"), wrong.dump());
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "tensor 'z' is not in its shard");

  // A tensor the index names that no shard has.
  json ghost = index;
  ghost["weight_map"]["w"] = "model-00002-of-00002.safetensors";
  test::writeFile(dir.file("model.safetensors.index.json"), ghost.dump());
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "tensor 'w' is not in its shard");

  // A missing shard.
  json missing = index;
  missing["weight_map"]["z"] = "model-00003-of-00003.safetensors";
  test::writeFile(dir.file("model.safetensors.index.json"), missing.dump());
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "shard 'model-00003-of-00003.safetensors' (for "
                        "tensor 'z') does not exist");

  // Shards outside the directory are refused.
  json escape = index;
  escape["weight_map"]["z"] = "../model-00002-of-00002.safetensors";
  test::writeFile(dir.file("model.safetensors.index.json"), escape.dump());
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "not a file in the model directory");

  test::writeFile(dir.file("model.safetensors.index.json"), "{\"weight_map\"");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "invalid JSON");
  test::writeFile(dir.file("model.safetensors.index.json"),
                  "{\"weight_map\": {}}");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "weight_map is empty");
  test::writeFile(dir.file("model.safetensors.index.json"), "{}");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "weight_map");
}

TEST(TensorStore, MissingOrEmpty) {
  test::TempDir dir;
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "no model.safetensors.index.json, model.safetensors "
                        "or *.safetensors file");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.file("none")),
                        "no such file or directory");
}

//===----------------------------------------------------------------------===//
// Malformed files
//===----------------------------------------------------------------------===//

TEST(SafetensorsMalformed, ShorterThanLength) {
  test::TempDir dir;
  expectBadFile(dir, "", "shorter than the 8-byte header length");
  expectBadFile(dir, std::string(5, '\0'), "shorter than the 8-byte");
}

TEST(SafetensorsMalformed, HeaderLongerThanFile) {
  test::TempDir dir;
  expectBadFile(dir, craft("{}", "", 1000),
                "header length 1000 exceeds the "
                "file");
}

TEST(SafetensorsMalformed, HugeHeaderLength) {
  test::TempDir dir;
  expectBadFile(dir, craft("{}", "", UINT64_MAX), "exceeds the file");
  expectBadFile(dir, craft("{}", "", 0x8000000000000000ull),
                "exceeds the file");
}

TEST(SafetensorsMalformed, InvalidJson) {
  test::TempDir dir;
  expectBadFile(dir, craft("{\"a\": ", ""), "header is not valid JSON");
  expectBadFile(dir, craft("", ""), "header is not valid JSON");
  expectBadFile(dir, craft("[1, 2]", ""), "header is not a JSON object");
  expectBadFile(dir, craft(std::string("{\"a\"\0:1}", 8), ""),
                "not valid JSON");
}

TEST(SafetensorsMalformed, TruncatedData) {
  test::TempDir dir;
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            std::string(8, 'x')),
      "tensor 't': data_offsets [0, 16] run past the end of the data section "
      "(8 bytes; is the file truncated?)");
}

TEST(SafetensorsMalformed, OffsetsOutOfBounds) {
  test::TempDir dir;
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[100,104]}})",
            std::string(16, 'x')),
      "run past the end");
  expectBadFile(dir,
                craft(R"({"t":{"dtype":"U8","shape":[4],)"
                      R"("data_offsets":[18446744073709551615,3]}})",
                      std::string(16, 'x')),
                "is after end");
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})",
            std::string(16, 'x')),
      "data_offsets must be non-negative integers");
  expectBadFile(dir,
                craft(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0]}})",
                      std::string(16, 'x')),
                "data_offsets must be an array [begin, end]");
  expectBadFile(dir, craft(R"({"t":{"dtype":"U8","shape":[4]}})", ""),
                "data_offsets must be an array");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  test::TempDir dir;
  expectBadFile(
      dir,
      craft(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
            std::string(16, 'x')),
      "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
  // Identical ranges overlap too; empty tensors never do.
  expectBadFile(dir,
                craft(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                      std::string(8, 'x')),
                "overlap");
  test::writeFile(
      dir.file("ok.safetensors"),
      craft(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
            std::string(8, 'x')));
  EXPECT_TRUE(SafetensorsFile::open(dir.file("ok.safetensors")));
}

TEST(SafetensorsMalformed, ShapeByteMismatch) {
  test::TempDir dir;
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
            std::string(8, 'x')),
      "tensor 't': F32 [3] needs 12 bytes but data_offsets span 8");
  expectBadFile(dir,
                craft(R"({"t":{"dtype":"BF16","shape":[4611686018427387904,)"
                      R"(4611686018427387904],"data_offsets":[0,8]}})",
                      std::string(8, 'x')),
                "overflows 64 bits");
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
            std::string(8, 'x')),
      "shape dimensions must be non-negative integers");
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})",
            std::string(8, 'x')),
      "shape dimensions must be non-negative integers");
  expectBadFile(dir,
                craft(R"({"t":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})",
                      std::string(8, 'x')),
                "missing or non-array shape");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  test::TempDir dir;
  expectBadFile(
      dir,
      craft(R"({"t":{"dtype":"F8_E9M9","shape":[4],"data_offsets":[0,4]}})",
            std::string(4, 'x')),
      "tensor 't': unknown dtype 'F8_E9M9'");
  expectBadFile(dir,
                craft(R"({"t":{"dtype":3,"shape":[4],"data_offsets":[0,4]}})",
                      std::string(4, 'x')),
                "missing or non-string dtype");
  expectBadFile(dir, craft(R"({"t":[1,2]})", ""),
                "header entry is not an object");
}

TEST(SafetensorsMalformed, BadMetadata) {
  test::TempDir dir;
  expectBadFile(dir, craft(R"({"__metadata__":{"format":1}})", ""),
                "__metadata__ value of 'format' is not a string");
  expectBadFile(dir, craft(R"({"__metadata__":"pt"})", ""),
                "__metadata__ is not an object");
}

TEST(SafetensorsMalformed, NotARegularFile) {
  test::TempDir dir;
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(dir.path()),
                        "not a regular file");
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(dir.file("missing")),
                        "cannot open");
}

TEST(SafetensorsMalformed, RandomCorruptionNeverReadsOutOfBounds) {
  // Flips bytes in the length and header, or truncates the file, many times
  // over; every open must either fail cleanly or give views that lie inside
  // the file (ASan builds check the reads below).
  test::TempDir dir;
  std::string good = dir.file("good.safetensors");
  ASSERT_TRUE(writeSafetensors(good, {makeTensor("w", DType::BF16, {8, 4}, 1),
                                      makeTensor("b", DType::F32, {3}, 2),
                                      makeTensor("s", DType::U8, {5}, 3)}));
  const std::string original = test::readFile(good);
  uint64_t state = 12345;
  auto next = [&state]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  std::string path = dir.file("fuzz.safetensors");
  int opened = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string bytes = original;
    if (iter % 5 == 4) {
      bytes.resize(next() % bytes.size());
    } else {
      int flips = 1 + next() % 4;
      uint64_t headerEnd = 8 + (original.size() > 200 ? 200 : 0);
      for (int f = 0; f < flips; ++f)
        bytes[next() % headerEnd] = static_cast<char>(next());
    }
    test::writeFile(path, bytes);
    Expected<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::open(path);
    if (!file) {
      EXPECT_FALSE(file.message().empty());
      continue;
    }
    ++opened;
    uint64_t sum = 0;
    for (const TensorView &t : (*file)->tensors())
      for (size_t i = 0; i < t.nbytes; ++i)
        sum += t.data[i];
    (void)sum;
  }
  EXPECT_GT(opened, 0); // some flips land in harmless places
}
