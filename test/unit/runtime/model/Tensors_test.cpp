//===- Tensors_test.cpp - The checkpoint's tensor table -------------------===//
//
// The table against K3.md §10 written out by hand: names (with the K3 and
// Kimi-Linear prefixes, layer and expert numbers), shapes at the real K3
// geometry, which variant has which tensor, the stored dtypes each admits,
// and the walk over one model (order, early stop, agreement with hasTensor).
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Presets.h"
#include "runtime/model/Tensors.h"

#include <gtest/gtest.h>

#include <set>

using namespace k3;

namespace {

ModelConfig preset(const std::string &name) {
  Expected<ModelConfig> c = presetConfig(name);
  EXPECT_TRUE(c) << c.status().message();
  return *c;
}

using Shape = std::vector<int64_t>;

} // namespace

TEST(Tensors, TableIsInIdOrderAndGroupedByPart) {
  const std::vector<TensorEntry> &table = tensorTable();
  ASSERT_EQ(table.size(), static_cast<size_t>(TensorId::Count));
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(table[i].id), i) << table[i].name;
    if (i) {
      EXPECT_LE(table[i - 1].part, table[i].part) << table[i].name;
    }
    EXPECT_NE(table[i].shape, nullptr) << table[i].name;
  }
}

TEST(Tensors, NamesFollowTheHuggingFaceLayout) {
  const ModelConfig k3 = preset("tiny"), lin = preset("tiny-linear");
  EXPECT_EQ(tensorName(k3, TensorId::EmbedTokens),
            "language_model.model.embed_tokens.weight");
  EXPECT_EQ(tensorName(k3, TensorId::LmHead), "language_model.lm_head.weight");
  EXPECT_EQ(tensorName(lin, TensorId::LmHead), "lm_head.weight");
  EXPECT_EQ(tensorName(lin, TensorId::FinalNorm), "model.norm.weight");
  EXPECT_EQ(tensorName(k3, TensorId::OutputAttnResProj),
            "language_model.model.output_attn_res_proj.weight");
  EXPECT_EQ(tensorName(k3, TensorId::KdaFAProj, 5),
            "language_model.model.layers.5.self_attn.f_a_proj.weight");
  EXPECT_EQ(tensorBaseName(k3, TensorId::KdaFAProj, 5),
            "language_model.model.layers.5.self_attn.f_a_proj");
  EXPECT_EQ(tensorName(lin, TensorId::KdaQConv, 2),
            "model.layers.2.self_attn.q_conv1d.weight");
  EXPECT_EQ(tensorName(lin, TensorId::KdaALog, 2),
            "model.layers.2.self_attn.A_log");
  EXPECT_EQ(tensorName(lin, TensorId::KdaDtBias, 2),
            "model.layers.2.self_attn.dt_bias");
  EXPECT_EQ(tensorName(k3, TensorId::MlaKvAProj, 3),
            "language_model.model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(tensorName(k3, TensorId::SelfAttentionResNorm, 0),
            "language_model.model.layers.0.self_attention_res_norm.weight");
  EXPECT_EQ(tensorName(k3, TensorId::MoeGateBias, 1),
            "language_model.model.layers.1.block_sparse_moe.gate."
            "e_score_correction_bias");
  EXPECT_EQ(tensorName(k3, TensorId::ExpertW2, 1, 7),
            "language_model.model.layers.1.block_sparse_moe.experts.7.w2."
            "weight");
  // Without an expert number: the importer's stacked weight.
  EXPECT_EQ(tensorBaseName(k3, TensorId::ExpertW3, 1),
            "language_model.model.layers.1.block_sparse_moe.experts.{e}.w3");
  EXPECT_EQ(tensorName(k3, TensorId::SharedDownProj, 1),
            "language_model.model.layers.1.block_sparse_moe.shared_experts."
            "down_proj.weight");
  EXPECT_EQ(tensorName(k3, TensorId::RoutedExpertNorm, 1),
            "language_model.model.layers.1.block_sparse_moe."
            "routed_expert_norm.weight");
  EXPECT_EQ(tensorName(lin, TensorId::MlpDownProj, 0),
            "model.layers.0.mlp.down_proj.weight");
}

TEST(Tensors, ShapesAtTheRealK3Geometry) {
  // K3.md §1: D 7168, KDA 96 x 128 (C 12288), conv 4, q_lora 1536, kv_lora
  // 512, N 96, P 128 / R 64 / V 128, dense 33792, 896 experts of 3072 on a
  // latent 3584, 2 shared, vocab 163840.
  const ModelConfig c = preset("k3");
  auto shape = [&](TensorId id) { return tensorShape(c, id); };
  EXPECT_EQ(shape(TensorId::EmbedTokens), (Shape{163840, 7168}));
  EXPECT_EQ(shape(TensorId::InputLayernorm), (Shape{7168}));
  EXPECT_EQ(shape(TensorId::MlpResProj), (Shape{1, 7168}));
  EXPECT_EQ(shape(TensorId::KdaQProj), (Shape{12288, 7168}));
  EXPECT_EQ(shape(TensorId::KdaVConv), (Shape{12288, 1, 4}));
  EXPECT_EQ(shape(TensorId::KdaFAProj), (Shape{128, 7168}));
  EXPECT_EQ(shape(TensorId::KdaFBProj), (Shape{12288, 128}));
  EXPECT_EQ(shape(TensorId::KdaDtBias), (Shape{12288}));
  EXPECT_EQ(shape(TensorId::KdaALog), (Shape{96}));
  EXPECT_EQ(shape(TensorId::KdaBProj), (Shape{96, 7168}));
  EXPECT_EQ(shape(TensorId::KdaGProj), (Shape{12288, 7168}));
  EXPECT_EQ(shape(TensorId::KdaONorm), (Shape{128}));
  EXPECT_EQ(shape(TensorId::KdaOProj), (Shape{7168, 12288}));
  EXPECT_EQ(shape(TensorId::MlaQAProj), (Shape{1536, 7168}));
  EXPECT_EQ(shape(TensorId::MlaQALayernorm), (Shape{1536}));
  EXPECT_EQ(shape(TensorId::MlaQBProj), (Shape{96 * 192, 1536}));
  EXPECT_EQ(shape(TensorId::MlaKvAProj), (Shape{576, 7168}));
  EXPECT_EQ(shape(TensorId::MlaKvALayernorm), (Shape{512}));
  EXPECT_EQ(shape(TensorId::MlaKvBProj), (Shape{96 * 256, 512}));
  EXPECT_EQ(shape(TensorId::MlaGProj), (Shape{96 * 128, 7168}));
  EXPECT_EQ(shape(TensorId::MlaOProj), (Shape{7168, 96 * 128}));
  EXPECT_EQ(shape(TensorId::MlpGateProj), (Shape{33792, 7168}));
  EXPECT_EQ(shape(TensorId::MlpDownProj), (Shape{7168, 33792}));
  EXPECT_EQ(shape(TensorId::MoeGate), (Shape{896, 7168}));
  EXPECT_EQ(shape(TensorId::MoeGateBias), (Shape{896}));
  EXPECT_EQ(shape(TensorId::ExpertW1), (Shape{3072, 3584}));
  EXPECT_EQ(shape(TensorId::ExpertW2), (Shape{3584, 3072}));
  EXPECT_EQ(shape(TensorId::ExpertW3), (Shape{3072, 3584}));
  EXPECT_EQ(shape(TensorId::SharedUpProj), (Shape{6144, 7168}));
  EXPECT_EQ(shape(TensorId::SharedDownProj), (Shape{7168, 6144}));
  EXPECT_EQ(shape(TensorId::RoutedExpertDownProj), (Shape{3584, 7168}));
  EXPECT_EQ(shape(TensorId::RoutedExpertUpProj), (Shape{7168, 3584}));
  EXPECT_EQ(shape(TensorId::RoutedExpertNorm), (Shape{3584}));
  EXPECT_EQ(shape(TensorId::LmHead), (Shape{163840, 7168}));
}

TEST(Tensors, WhichVariantHasWhich) {
  const ModelConfig k3 = preset("tiny"), lin = preset("tiny-linear");
  // K3: full-rank gate, q_lora, output gate, latent MoE, AttnRes; layer 0
  // dense KDA, layer 3 MLA.
  EXPECT_TRUE(hasTensor(k3, TensorId::KdaGProj, 0));
  EXPECT_FALSE(hasTensor(k3, TensorId::KdaGAProj, 0));
  EXPECT_FALSE(hasTensor(k3, TensorId::KdaQProj, 3));
  EXPECT_TRUE(hasTensor(k3, TensorId::MlaQAProj, 3));
  EXPECT_FALSE(hasTensor(k3, TensorId::MlaQProj, 3));
  EXPECT_TRUE(hasTensor(k3, TensorId::MlaGProj, 3));
  EXPECT_TRUE(hasTensor(k3, TensorId::MlpGateProj, 0));
  EXPECT_FALSE(hasTensor(k3, TensorId::MoeGate, 0));
  EXPECT_TRUE(hasTensor(k3, TensorId::RoutedExpertNorm, 1));
  EXPECT_TRUE(hasTensor(k3, TensorId::SelfAttentionResProj, 0));
  EXPECT_TRUE(hasTensor(k3, TensorId::OutputAttnResNorm));
  // Kimi-Linear: low-rank gate, direct q_proj, no output gate, experts on
  // the full hidden size, plain residuals.
  EXPECT_FALSE(hasTensor(lin, TensorId::KdaGProj, 0));
  EXPECT_TRUE(hasTensor(lin, TensorId::KdaGBProj, 0));
  EXPECT_TRUE(hasTensor(lin, TensorId::MlaQProj, 3));
  EXPECT_FALSE(hasTensor(lin, TensorId::MlaQBProj, 3));
  EXPECT_FALSE(hasTensor(lin, TensorId::MlaGProj, 3));
  EXPECT_FALSE(hasTensor(lin, TensorId::RoutedExpertUpProj, 1));
  EXPECT_FALSE(hasTensor(lin, TensorId::MlpResNorm, 1));
  EXPECT_FALSE(hasTensor(lin, TensorId::OutputAttnResProj));
  EXPECT_EQ(tensorShape(lin, TensorId::ExpertW1),
            (Shape{lin.moeIntermediateSize, lin.hiddenSize}));
  ModelConfig tied = lin;
  tied.tieWordEmbeddings = true;
  EXPECT_TRUE(hasTensor(lin, TensorId::LmHead));
  EXPECT_FALSE(hasTensor(tied, TensorId::LmHead));
}

TEST(Tensors, StoredDtypes) {
  const TensorEntry &conv = tensorEntry(TensorId::KdaQConv);
  const TensorEntry &oNorm = tensorEntry(TensorId::KdaONorm);
  for (const TensorEntry *e : {&conv, &oNorm}) {
    EXPECT_TRUE(tensorDtypeAllowed(e->dtypes, DType::F32)) << e->name;
    EXPECT_TRUE(tensorDtypeAllowed(e->dtypes, DType::BF16)) << e->name;
    EXPECT_FALSE(tensorDtypeAllowed(e->dtypes, DType::F16)) << e->name;
  }
  const TensorDtypes proj = tensorEntry(TensorId::KdaQProj).dtypes;
  EXPECT_TRUE(tensorDtypeAllowed(proj, DType::BF16));
  EXPECT_FALSE(tensorDtypeAllowed(proj, DType::F32));
  const TensorDtypes aLog = tensorEntry(TensorId::KdaALog).dtypes;
  EXPECT_TRUE(tensorDtypeAllowed(aLog, DType::F32));
  EXPECT_FALSE(tensorDtypeAllowed(aLog, DType::BF16));
  EXPECT_TRUE(tensorDtypeAllowed(tensorEntry(TensorId::MoeGateBias).dtypes,
                                 DType::BF16));
  EXPECT_EQ(tensorEntry(TensorId::ExpertW2).dtypes, TensorDtypes::Expert);
  EXPECT_STREQ(tensorDtypesText(conv.dtypes), "F32 or BF16");
  EXPECT_STREQ(tensorDtypesText(proj), "BF16");
}

TEST(Tensors, WalkListsEachTensorOnceInCheckpointOrder) {
  for (const char *name : {"tiny", "tiny-linear", "tiny-odd"}) {
    const ModelConfig c = preset(name);
    std::vector<std::string> names;
    std::set<std::string> seen;
    forEachModelTensor(c, [&](const ModelTensor &t) {
      EXPECT_TRUE(hasTensor(c, t.entry->id, t.layer)) << t.name;
      EXPECT_EQ(t.shape, tensorShape(c, t.entry->id)) << t.name;
      EXPECT_EQ(t.name, tensorBaseName(c, t.entry->id, t.layer, t.expert));
      EXPECT_EQ(t.expert >= 0, t.entry->part == TensorPart::RoutedExpert);
      EXPECT_TRUE(seen.insert(t.name).second) << "twice: " << t.name;
      names.push_back(tensorEntry(t.entry->id).linear ? t.name + ".weight"
                                                      : t.name);
      return true;
    });
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names.front(), tensorName(c, TensorId::EmbedTokens)) << name;
    EXPECT_EQ(names.back(), tensorName(c, TensorId::LmHead)) << name;
    // Routed experts in MXFP4 are two stored tensors per entry; otherwise
    // the walk and the listing agree name for name.
    if (!c.expertsMxfp4) {
      EXPECT_EQ(names, expectedTensorNames(c)) << name;
    }
  }
}

TEST(Tensors, WalkStopsWhenAsked) {
  int calls = 0;
  forEachModelTensor(preset("tiny"), [&](const ModelTensor &) {
    return ++calls < 5;
  });
  EXPECT_EQ(calls, 5);
}
