//===- ModelWeights_test.cpp - Binding checkpoint tensors to roles --------===//
//
// Models written by the model maker bind cleanly, in both stored-dtype forms
// (K3.md §10 "Stored dtypes": the published K3's F32 conv filters and o_norm,
// Kimi-Linear's BF16 router bias), and with what real checkpoints carry
// besides the text model (a vision tower and projector in the last shards,
// layer 0's unused self_attention_res_*); a checkpoint with a tensor removed,
// mis-shaped or of the wrong dtype is reported by name with the expected and
// found dtype/shape.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>

using namespace k3;

namespace {

ModelConfig preset(const std::string &name) {
  Expected<ModelConfig> c = presetConfig(name);
  EXPECT_TRUE(c) << c.message();
  return *c;
}

/// Copies the model in `from` to `to`, letting `edit` change the tensor list.
void rewrite(const test::TempDir &from, const test::TempDir &to,
             const std::function<void(std::vector<TensorData> &)> &edit) {
  Expected<TensorStore> store = TensorStore::open(from.path());
  ASSERT_TRUE(store) << store.message();
  std::vector<TensorData> tensors;
  for (const TensorView *v : store->all())
    tensors.push_back({v->name, v->dtype, v->shape,
                       std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  edit(tensors);
  ASSERT_TRUE(writeSafetensors(to.file("model.safetensors"), tensors));
}

TensorData *findTensor(std::vector<TensorData> &ts, const std::string &name) {
  for (TensorData &t : ts)
    if (t.name == name)
      return &t;
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

} // namespace

TEST(ModelWeights, TinyBindsCleanly) {
  ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 1, dir.path()));
  Expected<TensorStore> store = TensorStore::open(dir.path());
  ASSERT_TRUE(store) << store.message();
  EXPECT_EQ(store->size(), expectedTensorNames(c).size());
  Expected<ModelWeights> w = bindModelWeights(c, *store);
  ASSERT_TRUE(w) << w.message();

  ASSERT_EQ(w->layers.size(), 8u);
  EXPECT_EQ(w->embedTokens->shape, (std::vector<int64_t>{1024, 256}));
  EXPECT_NE(w->lmHead, w->embedTokens);
  EXPECT_NE(w->outputAttnRes.proj, nullptr);
  EXPECT_EQ(w->outputAttnRes.proj->shape, (std::vector<int64_t>{1, 256}));

  const LayerWeights &l0 = w->layers[0];
  EXPECT_TRUE(l0.isDense);
  EXPECT_FALSE(l0.isMla);
  EXPECT_EQ(l0.mlp.gate.weight->shape, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(l0.mlp.down.weight->shape, (std::vector<int64_t>{256, 512}));
  EXPECT_NE(l0.selfAttentionRes.norm, nullptr);
  EXPECT_NE(l0.mlpRes.proj, nullptr);
  // KDA with the full-rank gate and K3's padded A_log.
  EXPECT_TRUE(l0.kda.gProj.present());
  EXPECT_FALSE(l0.kda.gAProj.present());
  EXPECT_EQ(l0.kda.qConv->shape, (std::vector<int64_t>{256, 1, 4}));
  EXPECT_EQ(l0.kda.aLog->dtype, DType::F32);
  EXPECT_EQ(l0.kda.aLog->shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(l0.kda.dtBias->shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(l0.kda.fAProj.weight->shape, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(l0.kda.oNorm->shape, (std::vector<int64_t>{64}));

  const LayerWeights &l3 = w->layers[3];
  EXPECT_TRUE(l3.isMla);
  EXPECT_FALSE(l3.isDense);
  EXPECT_TRUE(l3.mla.qAProj.present());
  EXPECT_FALSE(l3.mla.qProj.present());
  EXPECT_EQ(l3.mla.qBProj.weight->shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(l3.mla.kvAProj.weight->shape, (std::vector<int64_t>{96, 256}));
  EXPECT_EQ(l3.mla.kvBProj.weight->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(l3.mla.gProj.weight->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(l3.mla.oProj.weight->shape, (std::vector<int64_t>{256, 128}));

  // Latent MXFP4 MoE: experts act on Dm = 128, I = 128.
  const MoeWeights &moe = l3.moe;
  ASSERT_EQ(moe.experts.size(), 16u);
  EXPECT_EQ(moe.gate.weight->shape, (std::vector<int64_t>{16, 256}));
  EXPECT_EQ(moe.eScoreCorrectionBias->dtype, DType::F32);
  const LinearWeight &w1 = moe.experts[15].gate;
  EXPECT_TRUE(w1.mxfp4);
  EXPECT_EQ(w1.weight, nullptr);
  EXPECT_EQ(w1.out, 128);
  EXPECT_EQ(w1.in, 128);
  EXPECT_EQ(w1.packed->shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(w1.scale->shape, (std::vector<int64_t>{128, 4}));
  EXPECT_TRUE(moe.experts[0].down.mxfp4);
  EXPECT_EQ(moe.experts[0].down.out, 128);
  EXPECT_EQ(moe.shared.gate.weight->shape, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(moe.routedDown.weight->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(moe.routedUp.weight->shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(moe.routedNorm->shape, (std::vector<int64_t>{128}));
}

TEST(ModelWeights, TinyLinearBindsCleanly) {
  ModelConfig c = preset("tiny-linear");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 1, dir.path()));
  Expected<TensorStore> store = TensorStore::open(dir.path());
  ASSERT_TRUE(store) << store.message();
  EXPECT_EQ(store->size(), expectedTensorNames(c).size());
  EXPECT_NE(store->find("model.layers.0.input_layernorm.weight"), nullptr);
  Expected<ModelWeights> w = bindModelWeights(c, *store);
  ASSERT_TRUE(w) << w.message();

  EXPECT_EQ(w->outputAttnRes.proj, nullptr);
  const LayerWeights &l1 = w->layers[1];
  EXPECT_EQ(l1.selfAttentionRes.norm, nullptr);
  EXPECT_FALSE(l1.kda.gProj.present());
  EXPECT_EQ(l1.kda.gAProj.weight->shape, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(l1.kda.gBProj.weight->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(l1.kda.aLog->shape, (std::vector<int64_t>{1, 1, 4, 1}));
  const MoeWeights &moe = l1.moe;
  EXPECT_FALSE(moe.experts[0].gate.mxfp4);
  EXPECT_EQ(moe.experts[0].gate.weight->shape,
            (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(moe.experts[0].down.weight->shape,
            (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(moe.shared.gate.weight->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_FALSE(moe.routedDown.present());
  EXPECT_EQ(moe.routedNorm, nullptr);

  const LayerWeights &l7 = w->layers[7];
  EXPECT_TRUE(l7.isMla);
  EXPECT_TRUE(l7.mla.qProj.present());
  EXPECT_EQ(l7.mla.qProj.weight->shape, (std::vector<int64_t>{256, 256}));
  EXPECT_FALSE(l7.mla.qAProj.present());
  EXPECT_EQ(l7.mla.qALayernorm, nullptr);
  EXPECT_FALSE(l7.mla.gProj.present());
}

TEST(ModelWeights, ExpectedNamesFollowTheContract) {
  std::vector<std::string> k3Names = expectedTensorNames(preset("tiny"));
  auto has = [](const std::vector<std::string> &names, const std::string &n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  const std::string L = "language_model.model.layers.";
  EXPECT_EQ(k3Names.front(), "language_model.model.embed_tokens.weight");
  EXPECT_TRUE(has(k3Names, "language_model.lm_head.weight"));
  EXPECT_TRUE(has(k3Names, "language_model.model.norm.weight"));
  EXPECT_TRUE(has(k3Names, "language_model.model.output_attn_res_norm.weight"));
  EXPECT_TRUE(has(k3Names, L + "0.self_attention_res_proj.weight"));
  EXPECT_TRUE(has(k3Names, L + "0.mlp.gate_proj.weight"));
  EXPECT_TRUE(has(k3Names, L + "0.self_attn.A_log"));
  EXPECT_TRUE(has(k3Names, L + "0.self_attn.dt_bias"));
  EXPECT_TRUE(has(k3Names, L + "0.self_attn.q_conv1d.weight"));
  EXPECT_TRUE(has(k3Names, L + "3.self_attn.kv_a_proj_with_mqa.weight"));
  EXPECT_TRUE(has(k3Names, L + "3.self_attn.q_a_layernorm.weight"));
  EXPECT_TRUE(
      has(k3Names, L + "1.block_sparse_moe.gate.e_score_correction_bias"));
  EXPECT_TRUE(
      has(k3Names, L + "1.block_sparse_moe.experts.15.w3.weight_packed"));
  EXPECT_TRUE(
      has(k3Names, L + "1.block_sparse_moe.experts.15.w3.weight_scale"));
  EXPECT_FALSE(has(k3Names, L + "1.block_sparse_moe.experts.15.w3.weight"));
  EXPECT_TRUE(has(k3Names, L + "1.block_sparse_moe.routed_expert_norm.weight"));
  EXPECT_TRUE(
      has(k3Names, L + "1.block_sparse_moe.shared_experts.down_proj.weight"));

  std::vector<std::string> lin = expectedTensorNames(preset("tiny-linear"));
  EXPECT_EQ(lin.front(), "model.embed_tokens.weight");
  EXPECT_TRUE(has(lin, "lm_head.weight"));
  EXPECT_TRUE(has(lin, "model.layers.2.self_attn.g_a_proj.weight"));
  EXPECT_TRUE(has(lin, "model.layers.3.self_attn.q_proj.weight"));
  EXPECT_TRUE(has(lin, "model.layers.1.block_sparse_moe.experts.0.w1.weight"));
  EXPECT_FALSE(has(lin, "model.output_attn_res_norm.weight"));
}

TEST(ModelWeights, TiedEmbeddings) {
  ModelConfig c = preset("tiny-linear");
  c.tieWordEmbeddings = true;
  std::vector<std::string> names = expectedTensorNames(c);
  EXPECT_EQ(std::find(names.begin(), names.end(), "lm_head.weight"),
            names.end());
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 1, dir.path()));
  Expected<TensorStore> store = TensorStore::open(dir.path());
  ASSERT_TRUE(store) << store.message();
  EXPECT_EQ(store->find("lm_head.weight"), nullptr);
  Expected<ModelWeights> w = bindModelWeights(c, *store);
  ASSERT_TRUE(w) << w.message();
  EXPECT_EQ(w->lmHead, w->embedTokens);
}

TEST(ModelWeights, PublishedDtypesBind) {
  // kimi_k3: the conv filters and o_norm F32 (BF16 in the Simple form).
  ModelConfig c = preset("tiny");
  for (StoredDtypes dt : {StoredDtypes::Simple, StoredDtypes::Published}) {
    const DType small =
        dt == StoredDtypes::Published ? DType::F32 : DType::BF16;
    test::TempDir dir;
    ASSERT_TRUE(makeModel(c, 1, dir.path(), {}, 0, Structure::Planted, 0, dt));
    Expected<TensorStore> store = TensorStore::open(dir.path());
    ASSERT_TRUE(store) << store.message();
    Expected<ModelWeights> w = bindModelWeights(c, *store);
    ASSERT_TRUE(w) << w.message();
    const KdaWeights &k = w->layers[0].kda;
    for (const TensorView *t : {k.qConv, k.kConv, k.vConv, k.oNorm})
      EXPECT_EQ(t->dtype, small) << t->name;
    EXPECT_EQ(k.qConv->shape, (std::vector<int64_t>{256, 1, 4}));
    EXPECT_EQ(k.dtBias->dtype, DType::F32);
    EXPECT_EQ(k.aLog->dtype, DType::F32);
    EXPECT_EQ(w->layers[1].moe.eScoreCorrectionBias->dtype, DType::F32);
    // Everything else stays as it was.
    EXPECT_EQ(w->layers[0].inputLayernorm->dtype, DType::BF16);
    EXPECT_EQ(w->layers[3].mla.kvALayernorm->dtype, DType::BF16);
  }
  // kimi_linear: the router bias BF16 (F32 in the Simple form); convs BF16.
  c = preset("tiny-linear");
  for (StoredDtypes dt : {StoredDtypes::Simple, StoredDtypes::Published}) {
    test::TempDir dir;
    ASSERT_TRUE(makeModel(c, 1, dir.path(), {}, 0, Structure::Planted, 0, dt));
    Expected<TensorStore> store = TensorStore::open(dir.path());
    ASSERT_TRUE(store) << store.message();
    Expected<ModelWeights> w = bindModelWeights(c, *store);
    ASSERT_TRUE(w) << w.message();
    EXPECT_EQ(w->layers[1].moe.eScoreCorrectionBias->dtype,
              dt == StoredDtypes::Published ? DType::BF16 : DType::F32);
    EXPECT_EQ(w->layers[0].kda.qConv->dtype, DType::BF16);
    EXPECT_EQ(w->layers[0].kda.oNorm->dtype, DType::BF16);
  }
  // The real geometries default to the published dtypes, the tiny ones not.
  EXPECT_EQ(presetStoredDtypes("k3"), StoredDtypes::Published);
  EXPECT_EQ(presetStoredDtypes("kimi-linear-48b"), StoredDtypes::Published);
  EXPECT_EQ(presetStoredDtypes("tiny"), StoredDtypes::Simple);
  EXPECT_EQ(presetStoredDtypes("tiny-odd"), StoredDtypes::Simple);
}

TEST(ModelWeights, VisionTowerInTheLastShardsIsIgnored) {
  // The published K3 puts a vision tower and projector (vision_tower.*,
  // mm_projector.*) in its last shards: the index names them, the store
  // opens them, and binding the text model ignores them. Layer 0 also
  // carries self_attention_res_* although no block is committed before it.
  ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 1, dir.path(), {}, /*shardBytes=*/1 << 20,
                        Structure::Planted, 0, StoredDtypes::Published));
  std::vector<TensorData> vision1 = {
      {"vision_tower.patch_embed.proj.weight",
       DType::BF16,
       {8, 3, 2, 2},
       std::vector<uint8_t>(8 * 3 * 2 * 2 * 2, 0x3f)},
      {"vision_tower.encoder.blocks.0.norm0.bias",
       DType::F32,
       {8},
       std::vector<uint8_t>(8 * 4, 0)}};
  std::vector<TensorData> vision2 = {{"mm_projector.proj.0.weight",
                                      DType::BF16,
                                      {16, 8},
                                      std::vector<uint8_t>(16 * 8 * 2, 0x3f)},
                                     {"mm_projector.pre_norm.weight",
                                      DType::F32,
                                      {8},
                                      std::vector<uint8_t>(8 * 4, 0)}};
  ASSERT_TRUE(
      writeSafetensors(dir.file("model-vision-1.safetensors"), vision1));
  ASSERT_TRUE(
      writeSafetensors(dir.file("model-vision-2.safetensors"), vision2));
  nlohmann::json index;
  {
    std::ifstream in(dir.file("model.safetensors.index.json"));
    ASSERT_TRUE(in.good());
    in >> index;
  }
  const size_t textTensors = index["weight_map"].size();
  for (const TensorData &t : vision1)
    index["weight_map"][t.name] = "model-vision-1.safetensors";
  for (const TensorData &t : vision2)
    index["weight_map"][t.name] = "model-vision-2.safetensors";
  {
    std::ofstream out(dir.file("model.safetensors.index.json"));
    out << index.dump(2);
  }
  Expected<TensorStore> store = TensorStore::open(dir.path());
  ASSERT_TRUE(store) << store.message();
  EXPECT_EQ(store->size(), textTensors + 4);
  EXPECT_NE(store->find("mm_projector.pre_norm.weight"), nullptr);
  Expected<ModelWeights> w = bindModelWeights(c, *store);
  ASSERT_TRUE(w) << w.message();
  EXPECT_NE(w->layers[0].selfAttentionRes.norm, nullptr);
  EXPECT_NE(w->layers[0].selfAttentionRes.proj, nullptr);
  // A plan binds and decodes over it too (its weights name only the text
  // model; the F32 conv filters and o_norm bind as "vector" weights).
  K3C_COMPILED_PLAN(plan, c, "default", 16);
  Expected<std::unique_ptr<Session>> session = Session::open(plan, dir.path());
  ASSERT_TRUE(session) << session.message();
  Expected<GenerateResult> r = (*session)->generate({1, 2, 3}, 2);
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->tokens.size(), 2u);
}

class ModelWeightsErrors : public ::testing::Test {
protected:
  void SetUp() override {
    config = preset("tiny");
    ASSERT_TRUE(makeModel(config, 3, good.path()));
  }
  /// Rewrites the good model with `edit` and returns the bind error.
  std::string
  bindError(const std::function<void(std::vector<TensorData> &)> &edit) {
    test::TempDir bad;
    rewrite(good, bad, edit);
    Expected<TensorStore> store = TensorStore::open(bad.path());
    EXPECT_TRUE(store) << store.message();
    if (!store)
      return "";
    Expected<ModelWeights> w = bindModelWeights(config, *store);
    EXPECT_FALSE(w) << "expected a bind error";
    return w ? "" : w.message();
  }
  ModelConfig config;
  test::TempDir good;
};

TEST_F(ModelWeightsErrors, DeletedTensorIsNamed) {
  const std::string name =
      "language_model.model.layers.5.self_attn.f_b_proj.weight";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    ts.erase(
        std::remove_if(ts.begin(), ts.end(),
                       [&](const TensorData &t) { return t.name == name; }),
        ts.end());
  });
  EXPECT_EQ(msg, "missing tensor '" + name + "' (expected BF16 [256, 64])");
}

TEST_F(ModelWeightsErrors, DeletedExpertScaleIsNamed) {
  const std::string name = "language_model.model.layers.2.block_sparse_moe."
                           "experts.7.w2.weight_scale";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    ts.erase(
        std::remove_if(ts.begin(), ts.end(),
                       [&](const TensorData &t) { return t.name == name; }),
        ts.end());
  });
  EXPECT_EQ(msg, "missing tensor '" + name + "' (expected U8 [128, 4])");
}

TEST_F(ModelWeightsErrors, MisShapedTensorShowsExpectedAndFound) {
  const std::string name =
      "language_model.model.layers.3.self_attn.kv_b_proj.weight";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, name);
    t->shape = {128, 128}; // same byte count, wrong shape
  });
  EXPECT_EQ(msg, "tensor '" + name +
                     "': expected BF16 [256, 64], found BF16 [128, 128]");
}

TEST_F(ModelWeightsErrors, WrongDtypeShowsExpectedAndFound) {
  const std::string name = "language_model.model.layers.0.self_attn.dt_bias";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, name);
    t->dtype = DType::I32; // same byte count as F32
  });
  EXPECT_EQ(msg, "tensor '" + name + "': expected F32 [256], found I32 [256]");

  const std::string norm = "language_model.model.norm.weight";
  msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, norm);
    t->dtype = DType::F16;
  });
  EXPECT_EQ(msg, "tensor '" + norm + "': expected BF16 [256], found F16 [256]");
}

TEST_F(ModelWeightsErrors, SmallWeightsAreF32OrBf16Only) {
  // The conv filters and o_norm may be F32 or BF16 (the published K3 stores
  // F32, the maker BF16 here); F16 is neither.
  const std::string conv =
      "language_model.model.layers.2.self_attn.v_conv1d.weight";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    findTensor(ts, conv)->dtype = DType::F16; // same bytes as BF16
  });
  EXPECT_EQ(msg, "tensor '" + conv +
                     "': expected F32 or BF16 [256, 1, 4], found F16 "
                     "[256, 1, 4]");
  const std::string onorm =
      "language_model.model.layers.0.self_attn.o_norm.weight";
  msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, onorm);
    t->shape = {32};
    t->bytes.resize(64);
  });
  EXPECT_EQ(msg, "tensor '" + onorm +
                     "': expected F32 or BF16 [64], found BF16 [32]");
  // Only those: an F32 projection is refused.
  const std::string q = "language_model.model.layers.0.self_attn.q_proj.weight";
  msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, q);
    t->dtype = DType::F32;
    t->bytes.resize(t->bytes.size() * 2);
  });
  EXPECT_EQ(msg, "tensor '" + q +
                     "': expected BF16 [256, 256], found F32 [256, 256]");
}

TEST_F(ModelWeightsErrors, ShortALog) {
  const std::string name = "language_model.model.layers.1.self_attn.A_log";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, name);
    t->shape = {3};
    t->bytes.resize(12);
  });
  EXPECT_EQ(msg, "tensor '" + name +
                     "': expected F32 with at least 4 values (one per KDA "
                     "head), found F32 [3]");
}

TEST_F(ModelWeightsErrors, Bf16ExpertWhereMxfp4Expected) {
  // The config says MXFP4, so an expert stored bf16 is reported as missing
  // its packed form.
  const std::string base =
      "language_model.model.layers.1.block_sparse_moe.experts.0.w1";
  std::string msg = bindError([&](std::vector<TensorData> &ts) {
    TensorData *t = findTensor(ts, base + ".weight_packed");
    t->name = base + ".weight";
  });
  EXPECT_EQ(msg, "missing tensor '" + base +
                     ".weight_packed' (expected U8 [128, 64])");
}

TEST(ModelWeights, PerExpertFormWhenConfigIsBf16) {
  // A bf16 config still binds an expert that is only present packed.
  ModelConfig c = preset("tiny");
  test::TempDir mx;
  ASSERT_TRUE(makeModel(c, 1, mx.path()));
  ModelConfig bf = c;
  bf.expertsMxfp4 = false;
  test::TempDir bfDir;
  ASSERT_TRUE(makeModel(bf, 1, bfDir.path()));
  Expected<TensorStore> mxStore = TensorStore::open(mx.path());
  Expected<TensorStore> bfStore = TensorStore::open(bfDir.path());
  ASSERT_TRUE(mxStore && bfStore);
  // Everything bf16 except expert 3 of layer 1, which is packed.
  const std::string e3 =
      "language_model.model.layers.1.block_sparse_moe.experts.3.";
  std::vector<TensorData> tensors;
  for (const TensorView *v : bfStore->all()) {
    if (v->name.rfind(e3, 0) == 0)
      continue;
    tensors.push_back({v->name, v->dtype, v->shape,
                       std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  }
  for (const TensorView *v : mxStore->all())
    if (v->name.rfind(e3, 0) == 0)
      tensors.push_back({v->name, v->dtype, v->shape,
                         std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  test::TempDir mixed;
  ASSERT_TRUE(writeSafetensors(mixed.file("model.safetensors"), tensors));
  Expected<TensorStore> store = TensorStore::open(mixed.path());
  ASSERT_TRUE(store);
  Expected<ModelWeights> w = bindModelWeights(bf, *store);
  ASSERT_TRUE(w) << w.message();
  EXPECT_FALSE(w->layers[1].moe.experts[2].gate.mxfp4);
  EXPECT_TRUE(w->layers[1].moe.experts[3].gate.mxfp4);
  EXPECT_TRUE(w->layers[1].moe.experts[3].down.mxfp4);
}
