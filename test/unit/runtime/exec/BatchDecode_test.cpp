//===- BatchDecode_test.cpp - Several sequences in one plan ---------------===//
//
// A plan compiled with k3c --max-batch B holds B slots; Session::
// generateBatch decodes several sequences together, each in its own slot.
// The contract is invariance: a sequence's tokens and logits do not depend
// on the others, on its slot, or on the slot's previous tenant, so on the
// CPU every sequence of a batch must be bit-identical to the same request
// decoded alone by generate() with the batch-1 plan (a separate code path).
// The models are plain random (chaotic at bf16): a wrong position, a stale
// state or another sequence's state anywhere changes the greedy tokens, and
// the logits are compared bit for bit besides.
//
// The scheduler's mutant levers (BatchOptions) prove the comparison can
// fail: a snapshot restored into the wrong slot, two sequences' states
// swapped, a joining sequence that keeps its slot predecessor's position.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Session.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/model/Presets.h"
#include "tools/k3-mkmodel/ModelMaker.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

namespace k3 {
namespace {

constexpr int64_t kMaxSeq = 48;
constexpr int64_t kSlots = 4;

/// A random model of `preset` and its two plans (batch 1 and kSlots), made
/// once per preset and strategy for the file.
struct Fixture {
  test::TempDir dir;
  ModelConfig config;
  std::unique_ptr<Session> single, batched;
};

Fixture *fixture(const std::string &preset,
                 const std::string &fusion = "default") {
  static std::map<std::string, std::unique_ptr<Fixture>> all;
  std::unique_ptr<Fixture> &f = all[preset + "/" + fusion];
  if (f)
    return f.get();
  auto made = std::make_unique<Fixture>();
  Expected<ModelConfig> c = presetConfig(preset);
  EXPECT_TRUE(c.hasValue()) << c.message();
  if (!c)
    return nullptr;
  made->config = *c;
  Status st =
      makeModel(made->config, 11, made->dir.path(), {}, 0, Structure::Random);
  EXPECT_TRUE(st.isOk()) << st.message();
  for (int64_t b : {int64_t(1), kSlots}) {
    Expected<PlanDoc> plan =
        test::compiledPlan(made->config, fusion, kMaxSeq, b);
    EXPECT_TRUE(plan.hasValue()) << plan.message();
    if (!plan)
      return nullptr;
    Expected<std::unique_ptr<Session>> s =
        Session::open(plan.take(), made->dir.path());
    EXPECT_TRUE(s.hasValue()) << s.message();
    if (!s)
      return nullptr;
    (b == 1 ? made->single : made->batched) = s.take();
  }
  f = std::move(made);
  return f.get();
}

std::vector<int64_t> randomPrompt(std::mt19937_64 &rng, int64_t len,
                                  int64_t vocab) {
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  std::vector<int64_t> p(static_cast<size_t>(len));
  for (int64_t &t : p)
    t = id(rng);
  return p;
}

/// `n` requests of random prompts (1..9 tokens) and lengths (2..10 new
/// tokens), all keeping their logits.
std::vector<SequenceRequest> randomRequests(uint64_t seed, int n,
                                            int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(1, 9), gen(2, 10);
  std::vector<SequenceRequest> reqs;
  for (int i = 0; i < n; ++i) {
    SequenceRequest r;
    r.prompt = randomPrompt(rng, len(rng), vocab);
    r.options.maxNew = gen(rng);
    r.options.keepLogits = true;
    r.options.deviceGreedy = false;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

/// The number of `reqs` whose batched result differs from the request
/// decoded alone with the batch-1 plan, one token per step (tokens, or a
/// logit's bits), with the
/// first difference in `why`. A request that fails alone must fail in the
/// batch with the same message.
/// Each request decoded alone by generate() with the batch-1 plan (the
/// reference `differences` compares with): one token per step, or, with
/// `ownChunks`, in the request's own prompt chunks.
std::vector<Expected<GenerateResult>>
aloneResults(Fixture &f, const std::vector<SequenceRequest> &reqs,
             bool ownChunks = false) {
  std::vector<Expected<GenerateResult>> out;
  for (const SequenceRequest &r : reqs) {
    GenerateOptions one = r.options;
    if (!ownChunks)
      one.prefillChunk = 1;
    out.push_back(f.single->generate(r.prompt, one));
  }
  return out;
}

int differences(Fixture &f, const std::vector<SequenceRequest> &reqs,
                const BatchOptions &options, std::string &why,
                const std::vector<Expected<GenerateResult>> *reference =
                    nullptr) {
  std::vector<Expected<GenerateResult>> computed;
  if (!reference) {
    computed = aloneResults(f, reqs);
    reference = &computed;
  }
  Expected<BatchResult> batch = f.batched->generateBatch(reqs, options);
  if (!batch) {
    why = "the batch failed: " + batch.message();
    return static_cast<int>(reqs.size());
  }
  if (batch->sequences.size() != reqs.size()) {
    why = "the batch returned " + std::to_string(batch->sequences.size()) +
          " results";
    return static_cast<int>(reqs.size());
  }
  int bad = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    // Alone, one token per step: the batch's prompt chunks must not show.
    const Expected<GenerateResult> &alone = (*reference)[i];
    const Expected<GenerateResult> &in = batch->sequences[i];
    std::string d;
    if (!alone || !in) {
      if (alone.hasValue() != in.hasValue() ||
          (!alone && alone.message() != in.message()))
        d = "alone: " + (alone ? std::string("ok") : alone.message()) +
            "; in the batch: " + (in ? std::string("ok") : in.message());
    } else if (alone->tokens != in->tokens) {
      d = "different tokens";
    } else if (alone->logits.size() != in->logits.size() ||
               (!alone->logits.empty() &&
                std::memcmp(alone->logits.data(), in->logits.data(),
                            alone->logits.size() * sizeof(float)) != 0)) {
      d = "same tokens, different logit bits";
    } else if (alone->stopped != in->stopped ||
               alone->restoredTokens != in->restoredTokens) {
      d = "different stop or restore counts";
    }
    if (!d.empty()) {
      if (bad++ == 0)
        why = "request " + std::to_string(i) + ": " + d;
    }
  }
  return bad;
}

#define EXPECT_INVARIANT(f, reqs, options, ...)                                \
  do {                                                                         \
    std::string why_;                                                          \
    EXPECT_EQ(differences((f), (reqs), (options), why_, ##__VA_ARGS__), 0)     \
        << why_;                                                               \
  } while (0)

struct Case {
  const char *preset;
  const char *fusion;
};

class BatchInvariance : public ::testing::TestWithParam<Case> {};

/// More requests than slots, of different lengths: they leave at different
/// steps and later ones join slots used before. One is sampled (its own
/// seed), one ends at a stop id.
TEST_P(BatchInvariance, EverySequenceAsIfAlone) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture(GetParam().preset, GetParam().fusion);
  ASSERT_NE(f, nullptr);
  std::vector<SequenceRequest> reqs = randomRequests(3, 9, f->config.vocabSize);
  reqs[2].options.sampling.temperature = 0.8;
  reqs[2].options.sampling.topP = 0.9;
  reqs[2].options.sampling.seed = 5;
  // A stop id: the token request 4 chooses third when alone.
  Expected<GenerateResult> free4 =
      f->single->generate(reqs[4].prompt, reqs[4].options);
  ASSERT_TRUE(free4.hasValue()) << free4.message();
  reqs[4].options.maxNew = 10;
  reqs[4].options.stopIds = {free4->tokens.at(2)};
  Expected<BatchResult> b = f->batched->generateBatch(reqs);
  ASSERT_TRUE(b.hasValue()) << b.message();
  EXPECT_EQ(b->maxActive, kSlots);
  ASSERT_TRUE(b->sequences[4].hasValue());
  EXPECT_TRUE(b->sequences[4]->stopped);
  EXPECT_LE(b->sequences[4]->tokens.size(), 3u);
  // The reference, once: it does not depend on how the batch runs.
  const std::vector<Expected<GenerateResult>> alone = aloneResults(*f, reqs);
  EXPECT_INVARIANT(*f, reqs, BatchOptions(), &alone);
  // Fewer slots than the plan holds: the same results.
  BatchOptions two;
  two.batch = 2;
  EXPECT_INVARIANT(*f, reqs, two, &alone);
  // Prompts fed a token per step, and in chunks of 3 (several steps of
  // chunks, next to other sequences' decode rows).
  for (int64_t chunk : {1, 3}) {
    for (SequenceRequest &r : reqs)
      r.options.prefillChunk = chunk;
    EXPECT_INVARIANT(*f, reqs, BatchOptions(), &alone);
  }
}

/// generate() with the prompt in chunks of any size, also prompts longer
/// than a chunk: bit for bit one token per step. Then decoding on from
/// there, greedy on the device (the chain takes over from a chunk's last
/// row) and on the host.
TEST_P(BatchInvariance, ChunkedPrefillAsTokenByToken) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture(GetParam().preset, GetParam().fusion);
  ASSERT_NE(f, nullptr);
  std::mt19937_64 rng(71);
  for (int64_t len : {2, 7, 20}) {
    const std::vector<int64_t> prompt =
        randomPrompt(rng, len, f->config.vocabSize);
    GenerateOptions ref;
    ref.maxNew = 6;
    ref.keepLogits = true;
    ref.prefillChunk = 1;
    Expected<GenerateResult> want = f->single->generate(prompt, ref);
    ASSERT_TRUE(want.hasValue()) << want.message();
    for (int64_t chunk : {3, 7, 64}) {
      for (Session *s : {f->single.get(), f->batched.get()}) {
        GenerateOptions o = ref;
        o.prefillChunk = chunk;
        Expected<GenerateResult> got = s->generate(prompt, o);
        ASSERT_TRUE(got.hasValue()) << got.message();
        EXPECT_EQ(got->tokens, want->tokens) << len << " / " << chunk;
        EXPECT_EQ(0, std::memcmp(got->logits.data(), want->logits.data(),
                                 want->logits.size() * sizeof(float)))
            << len << " / " << chunk;
        if (s != f->single.get())
          continue;
        o.keepLogits = false; // greedy on the device
        got = s->generate(prompt, o);
        ASSERT_TRUE(got.hasValue()) << got.message();
        EXPECT_EQ(got->tokens, want->tokens)
            << "chained, " << len << " / " << chunk;
      }
    }
  }
  GenerateOptions bad;
  bad.prefillChunk = 0;
  EXPECT_ERROR_CONTAINS(f->single->generate({1, 2}, bad),
                        "the prefill chunk must be in [1, 4096] tokens, got 0");
  // Rows reserved before a prompt (Session::reserveRows, as k3-run does):
  // more than any step so far (bound: boundRows), then chunks that fit: the
  // same bits.
  const std::vector<int64_t> prompt =
      randomPrompt(rng, 20, f->config.vocabSize);
  GenerateOptions o;
  o.maxNew = 4;
  o.keepLogits = true;
  o.prefillChunk = 1;
  Expected<GenerateResult> want = f->single->generate(prompt, o);
  ASSERT_TRUE(want.hasValue()) << want.message();
  ASSERT_LT(f->single->boundRows(), 200u);
  ASSERT_TRUE(f->single->reserveRows(200).isOk());
  EXPECT_GE(f->single->boundRows(), 200u);
  for (int64_t chunk : {7, 20}) {
    o.prefillChunk = chunk;
    Expected<GenerateResult> got = f->single->generate(prompt, o);
    ASSERT_TRUE(got.hasValue()) << got.message();
    EXPECT_EQ(got->tokens, want->tokens) << "reserved, chunk " << chunk;
    EXPECT_EQ(0, std::memcmp(got->logits.data(), want->logits.data(),
                             want->logits.size() * sizeof(float)))
        << "reserved, chunk " << chunk;
  }
  EXPECT_ERROR_CONTAINS(f->single->reserveRows(4097),
                        "cannot reserve 4097 step rows: at most 4096");
}

/// PrefillForm::Chunk: a prompt chunk's KDA tokens in the chunk form of the
/// delta rule. Within fp32 rounding of the rows form (the logits after the
/// prompt close to them, the greedy token the same unless the top two are a
/// near-tie within that difference); and the batch invariance holds bit for
/// bit: a sequence's prompt chunks are the same runs of rows alone and in a
/// batch, next to other sequences' chunks and decode rows.
TEST_P(BatchInvariance, ChunkFormPrefillWithinRounding) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture(GetParam().preset, GetParam().fusion);
  ASSERT_NE(f, nullptr);
  // The fixture's sessions are shared: back to the rows form at the end.
  struct RowsAgain {
    Fixture *f;
    ~RowsAgain() {
      EXPECT_TRUE(f->single->setPrefillForm(PrefillForm::Rows).isOk());
      EXPECT_TRUE(f->batched->setPrefillForm(PrefillForm::Rows).isOk());
    }
  } rowsAgain{f};
  std::mt19937_64 rng(83);
  for (int64_t len : {7, 20, 40}) {
    const std::vector<int64_t> prompt =
        randomPrompt(rng, len, f->config.vocabSize);
    GenerateOptions o;
    o.maxNew = 1;
    o.keepLogits = true;
    o.prefillChunk = 16;
    ASSERT_TRUE(f->single->setPrefillForm(PrefillForm::Rows).isOk());
    Expected<GenerateResult> want = f->single->generate(prompt, o);
    ASSERT_TRUE(f->single->setPrefillForm(PrefillForm::Chunk).isOk());
    Expected<GenerateResult> got = f->single->generate(prompt, o);
    ASSERT_TRUE(want.hasValue() && got.hasValue());
    double err = 0, scale = 0;
    for (size_t i = 0; i < want->logits.size(); ++i) {
      err = std::max(err, double(std::fabs(want->logits[i] - got->logits[i])));
      scale = std::max(scale, double(std::fabs(want->logits[i])));
    }
    // The random models amplify a one-ulp bf16 difference of a KDA output
    // through the later layers (measured: up to 1.8% of the largest logit
    // at 40 tokens); kda_chunk_test holds the form itself to fp32 rounding.
    EXPECT_LT(err, 5e-2 * scale) << "prompt of " << len;
    // The greedy token: the same, unless the rows form's best two are
    // closer than twice the difference seen.
    std::vector<float> sorted = want->logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(),
                      std::greater<float>());
    if (sorted[0] - sorted[1] > 2 * err) {
      EXPECT_EQ(got->tokens, want->tokens) << "prompt of " << len;
    }
  }

  // The batch: each sequence as alone with the chunk form, bit for bit.
  std::vector<SequenceRequest> reqs =
      randomRequests(13, 6, f->config.vocabSize);
  std::uniform_int_distribution<int64_t> plen(5, 24);
  for (SequenceRequest &r : reqs) {
    r.prompt = randomPrompt(rng, plen(rng), f->config.vocabSize);
    r.options.prefillChunk = 8;
  }
  ASSERT_TRUE(f->single->setPrefillForm(PrefillForm::Chunk).isOk());
  ASSERT_TRUE(f->batched->setPrefillForm(PrefillForm::Chunk).isOk());
  const std::vector<Expected<GenerateResult>> alone =
      aloneResults(*f, reqs, /*ownChunks=*/true);
  EXPECT_INVARIANT(*f, reqs, BatchOptions(), &alone);
}

const Case kCases[] = {
    {"tiny", "default"},        {"tiny", "none"},        {"tiny", "max"},
    {"tiny-linear", "default"}, {"tiny-odd", "default"},
};

INSTANTIATE_TEST_SUITE_P(Presets, BatchInvariance, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string n = std::string(info.param.preset) +
                                           "_" + info.param.fusion;
                           for (char &ch : n)
                             if (ch == '-')
                               ch = '_';
                           return n;
                         });

/// One request in every slot, next to different companions each time.
TEST(BatchDecode, SlotAndCompanionsDoNotMatter) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture("tiny");
  ASSERT_NE(f, nullptr);
  const SequenceRequest target = randomRequests(17, 1, f->config.vocabSize)[0];
  for (int slot = 0; slot < kSlots; ++slot) {
    // The first kSlots requests take slots 0.. in order.
    std::vector<SequenceRequest> reqs =
        randomRequests(100 + slot, kSlots, f->config.vocabSize);
    reqs[static_cast<size_t>(slot)] = target;
    EXPECT_INVARIANT(*f, reqs, BatchOptions());
  }
}

/// A prefix snapshot (made in slot 0) restored into other slots, and one
/// that covers a whole prompt.
TEST(BatchDecode, SnapshotRestoredIntoAnotherSlot) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture("tiny");
  ASSERT_NE(f, nullptr);
  std::vector<SequenceRequest> reqs =
      randomRequests(29, 6, f->config.vocabSize);
  const std::vector<int64_t> prefix = {5, 9, 2, 7};
  Expected<PrefixSnapshot> snap = f->batched->snapshotPrefix(prefix);
  ASSERT_TRUE(snap.hasValue()) << snap.message();
  for (size_t i : {size_t(2), size_t(3), size_t(5)}) {
    std::vector<int64_t> p = prefix;
    p.insert(p.end(), reqs[i].prompt.begin(), reqs[i].prompt.end());
    reqs[i].prompt = p;
    reqs[i].options.prefix = &*snap;
  }
  reqs[3].prompt = prefix; // the whole prompt restored
  EXPECT_INVARIANT(*f, reqs, BatchOptions());
  Expected<BatchResult> b = f->batched->generateBatch(reqs);
  ASSERT_TRUE(b.hasValue()) << b.message();
  EXPECT_EQ(b->sequences[3]->restoredTokens, 4);

  // Mutant: restored into the next slot (the sequence's own slot starts
  // from zeros, a neighbour's state is overwritten).
  BatchOptions wrong;
  wrong.mutantSnapshotWrongSlot = true;
  std::string why;
  EXPECT_GT(differences(*f, reqs, wrong, why), 0)
      << "a snapshot restored into the wrong slot went unnoticed";
}

TEST(BatchDecode, MutantsAreCaught) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear"}) {
    Fixture *f = fixture(preset);
    ASSERT_NE(f, nullptr);
    const std::vector<SequenceRequest> reqs =
        randomRequests(41, 7, f->config.vocabSize);
    const std::vector<Expected<GenerateResult>> alone = aloneResults(*f, reqs);
    std::string why;
    ASSERT_EQ(differences(*f, reqs, BatchOptions(), why, &alone), 0) << why;

    BatchOptions stale;
    stale.mutantStalePosition = true;
    EXPECT_GT(differences(*f, reqs, stale, why, &alone), 0)
        << preset << ": a joining sequence at a stale position went unnoticed";

    BatchOptions swapped;
    swapped.mutantSwapStatesAfter = 3;
    EXPECT_GT(differences(*f, reqs, swapped, why, &alone), 0)
        << preset << ": two sequences' swapped states went unnoticed";
  }
}

/// Requests that fail end alone, with the message generate() gives; the
/// others decode as if alone. Batches larger than the plan are refused.
TEST(BatchDecode, FailuresEndAlone) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture("tiny");
  ASSERT_NE(f, nullptr);
  const int64_t vocab = f->config.vocabSize;
  std::vector<SequenceRequest> reqs = randomRequests(53, 6, vocab);
  reqs[1].prompt[0] = vocab;        // outside the vocabulary
  reqs[3].prompt.clear();           // empty
  reqs[4].options.maxNew = kMaxSeq; // prompt + max_new > max_seq
  EXPECT_INVARIANT(*f, reqs, BatchOptions());
  Expected<BatchResult> b = f->batched->generateBatch(reqs);
  ASSERT_TRUE(b.hasValue()) << b.message();
  EXPECT_ERROR_CONTAINS(b->sequences[1], "outside the vocabulary");
  EXPECT_ERROR_CONTAINS(b->sequences[3], "the prompt is empty");
  EXPECT_ERROR_CONTAINS(b->sequences[4], "exceeds the plan's max_seq of 48");
  EXPECT_TRUE(b->sequences[0].hasValue());

  BatchOptions big;
  big.batch = kSlots + 1;
  EXPECT_ERROR_CONTAINS(f->batched->generateBatch(reqs, big),
                        "a batch of 5 sequences is more than the 4 the plan "
                        "holds (max_batch 4; compile with k3c --max-batch 5)");
  EXPECT_ERROR_CONTAINS(f->single->generateBatch(reqs, big),
                        "more than the 1 the plan holds");
  // The batch-1 plan runs a batch of one.
  EXPECT_TRUE(f->single->generateBatch(reqs).hasValue());
}

/// Rows that ask for no logits (a prompt's tokens before its last) skip the
/// plan's logits tail and leave every state and every asked-for row's
/// logits as a step whose rows all ask for them, bit for bit.
TEST(BatchDecode, PromptRowsSkipTheLogitsTail) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear"}) {
    SCOPED_TRACE(preset);
    Fixture *f = fixture(preset);
    ASSERT_NE(f, nullptr);
    const PlanDoc &plan = f->batched->plan();
    Backend &be = const_cast<Backend &>(f->batched->backend());
    // The tail holds the lm_head and the argmax, and no sequence state.
    const size_t tail = logitsTailStart(plan);
    ASSERT_LT(tail + 1, plan.launches.size());
    EXPECT_GT(tail, 0u);
    auto run = [&](const std::vector<bool> &wanted,
                   std::vector<std::vector<float>> &logits,
                   std::vector<std::vector<uint8_t>> &states) {
      std::vector<SlotStep> rows = {
          {0, 3, 0}, {0, 7, 1}, {0, 1, 2}, {1, 5, 0}, {1, 2, 1}};
      for (size_t i = 0; i < rows.size(); ++i)
        rows[i].logits = wanted[i];
      ASSERT_TRUE(be.resetState().isOk());
      ASSERT_TRUE(be.stepSlots(rows).isOk());
      logits.assign(rows.size(), {});
      for (size_t i = 0; i < rows.size(); ++i)
        if (const float *l = be.rowLogits(i))
          logits[i].assign(l, l + be.vocab());
      states.clear();
      for (int64_t slot : {0, 1})
        for (size_t s = 0; s < plan.states.size(); ++s) {
          states.emplace_back();
          ASSERT_TRUE(be.readSlotState(slot, s, states.back()).isOk());
        }
    };
    std::vector<std::vector<float>> all, some;
    std::vector<std::vector<uint8_t>> allStates, someStates;
    run({true, true, true, true, true}, all, allStates);
    for (const std::vector<bool> &wanted :
         {std::vector<bool>{false, false, true, false, true},
          std::vector<bool>{false, false, false, false, true},
          std::vector<bool>{false, false, false, false, false}}) {
      run(wanted, some, someStates);
      EXPECT_TRUE(someStates == allStates) << "a state differs";
      for (size_t i = 0; i < wanted.size(); ++i) {
        ASSERT_EQ(some[i].empty(), !wanted[i]) << "row " << i;
        if (wanted[i]) {
          EXPECT_EQ(0, std::memcmp(some[i].data(), all[i].data(),
                                   all[i].size() * sizeof(float)))
              << "row " << i;
        }
      }
    }
  }
}

/// Rows that leave their logits on the device (SlotStep::hostLogits false)
/// report the plan's argmax (rowChoice): the host's greedy choice over the
/// same logits, which fetchRowLogits brings afterwards, bit for bit those
/// of a step that copied them. A row without logits has no choice.
TEST(BatchDecode, RowChoiceIsTheArgmaxOfTheRowsLogits) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear"}) {
    SCOPED_TRACE(preset);
    Fixture *f = fixture(preset);
    ASSERT_NE(f, nullptr);
    Backend &be = const_cast<Backend &>(f->batched->backend());
    ASSERT_TRUE(be.choosesRows());
    const int64_t vocab = be.vocab();
    std::vector<SlotStep> rows = {
        {0, 3, 0}, {0, 7, 1}, {1, 5, 0}, {2, 9, 0}, {3, 1, 0}};
    rows[0].logits = false;
    ASSERT_TRUE(be.resetState().isOk());
    ASSERT_TRUE(be.stepSlots(rows).isOk());
    std::vector<std::vector<float>> copied(rows.size());
    for (size_t i = 1; i < rows.size(); ++i) {
      const float *l = be.rowLogits(i);
      ASSERT_NE(l, nullptr) << i;
      copied[i].assign(l, l + vocab);
    }
    EXPECT_FALSE(be.rowChoice(0).hasValue()) << "a row without logits";
    EXPECT_FALSE(be.rowChoice(rows.size()).hasValue()) << "out of range";
    EXPECT_FALSE(be.fetchRowLogits(0).isOk());

    for (SlotStep &r : rows)
      r.hostLogits = false;
    ASSERT_TRUE(be.resetState().isOk());
    ASSERT_TRUE(be.stepSlots(rows).isOk());
    std::set<int64_t> ids;
    for (size_t i = 1; i < rows.size(); ++i) {
      Expected<GreedyChoice> c = be.rowChoice(i);
      ASSERT_TRUE(c.hasValue()) << c.message();
      EXPECT_FALSE(c->nonFinite) << i;
      Sampler greedy{SamplingParams()};
      EXPECT_EQ(c->id, greedy.next(copied[i].data(), vocab)) << "row " << i;
      ids.insert(c->id);
      ASSERT_TRUE(be.fetchRowLogits(i).isOk());
      const float *l = be.rowLogits(i);
      ASSERT_NE(l, nullptr) << i;
      EXPECT_EQ(0, std::memcmp(l, copied[i].data(), copied[i].size() * 4))
          << "row " << i;
    }
    // Different rows, different choices: not one row's answer for all.
    EXPECT_GT(ids.size(), 1u);
  }
}

/// Greedy sequences without logits take the device's choices in a batch:
/// the tokens of the host's choosing and of each sequence alone.
TEST(BatchDecode, DeviceChoicesAsTheHosts) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear"}) {
    SCOPED_TRACE(preset);
    Fixture *f = fixture(preset);
    ASSERT_NE(f, nullptr);
    std::vector<SequenceRequest> reqs =
        randomRequests(61, 7, f->config.vocabSize);
    for (SequenceRequest &r : reqs) {
      r.options.keepLogits = false;
      r.options.deviceGreedy = true;
    }
    reqs[3].options.prefillChunk = 3;
    std::vector<SequenceRequest> host = reqs;
    for (SequenceRequest &r : host)
      r.options.deviceGreedy = false;
    EXPECT_INVARIANT(*f, reqs, BatchOptions());
    Expected<BatchResult> a = f->batched->generateBatch(reqs),
                          b = f->batched->generateBatch(host);
    ASSERT_TRUE(a.hasValue()) << a.message();
    ASSERT_TRUE(b.hasValue()) << b.message();
    // The batch-1 plan too (its one row is a step() of the backend's own).
    Expected<BatchResult> one = f->single->generateBatch(reqs);
    ASSERT_TRUE(one.hasValue()) << one.message();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(a->sequences[i].hasValue()) << a->sequences[i].message();
      ASSERT_TRUE(b->sequences[i].hasValue()) << b->sequences[i].message();
      ASSERT_TRUE(one->sequences[i].hasValue()) << one->sequences[i].message();
      EXPECT_EQ(a->sequences[i]->tokens, b->sequences[i]->tokens) << i;
      EXPECT_EQ(one->sequences[i]->tokens, b->sequences[i]->tokens) << i;
      EXPECT_EQ(a->sequences[i]->tokens.size(),
                static_cast<size_t>(reqs[i].options.maxNew))
          << i;
    }
  }
}

/// The backend's slot interface refuses what is not a slot.
TEST(BatchDecode, SlotErrors) {
  K3C_SKIP_WITHOUT_COMPILER();
  Fixture *f = fixture("tiny");
  ASSERT_NE(f, nullptr);
  Backend &be = const_cast<Backend &>(f->batched->backend());
  EXPECT_EQ(be.maxBatch(), kSlots);
  EXPECT_ERROR_CONTAINS(be.stepSlots({}), "at least one row");
  EXPECT_ERROR_CONTAINS(be.stepSlots({{1, 3, 0}, {1, 4, 0}}),
                        "slot 1: row 1 is at position 0, not 1 after the "
                        "slot's previous row");
  EXPECT_ERROR_CONTAINS(be.stepSlots({{1, 3, 5}, {2, 1, 0}, {1, 4, 7}}),
                        "slot 1: row 2 is at position 7, not 6");
  EXPECT_ERROR_CONTAINS(
      be.stepSlots(std::vector<SlotStep>(kMaxStepRows + 1)),
      "a step of 4097 rows is more than the 4096 one step may have");
  EXPECT_ERROR_CONTAINS(be.stepSlots({{4, 3, 0}}),
                        "slot 4 is outside the plan's 4 slots (max_batch)");
  EXPECT_ERROR_CONTAINS(be.stepSlots({{0, 3, 0}, {2, -1, 0}}),
                        "slot 2: token id -1 is outside the vocabulary");
  EXPECT_ERROR_CONTAINS(be.stepSlots({{3, 3, kMaxSeq}}),
                        "slot 3: position 48 is outside");
  EXPECT_ERROR_CONTAINS(be.resetSlot(-1), "slot -1 is outside");
  std::vector<uint8_t> bytes;
  EXPECT_ERROR_CONTAINS(be.readSlotState(9, 0, bytes), "slot 9 is outside");
  ASSERT_TRUE(be.stepSlots({{0, 3, 0}, {0, 4, 1}, {1, 2, 0}}).isOk());
  EXPECT_NE(be.rowLogits(2), nullptr);
  EXPECT_EQ(be.rowLogits(3), nullptr);
  EXPECT_EQ(be.logits(), be.rowLogits(2));
  // A slot's state is its own: writing slot 2 leaves slot 1 as it was.
  size_t kda = 0;
  while (!f->batched->plan().states[kda].is(StateKind::KdaState))
    ++kda;
  ASSERT_TRUE(be.resetState().isOk());
  ASSERT_TRUE(be.stepSlots({{1, 3, 0}, {2, 5, 0}}).isOk());
  std::vector<uint8_t> one, two, after;
  ASSERT_TRUE(be.readSlotState(1, kda, one).isOk());
  ASSERT_TRUE(be.readSlotState(2, kda, two).isOk());
  EXPECT_NE(one, two);
  ASSERT_TRUE(be.resetSlot(2).isOk());
  ASSERT_TRUE(be.readSlotState(1, kda, after).isOk());
  EXPECT_EQ(one, after);
  ASSERT_TRUE(be.readSlotState(2, kda, after).isOk());
  EXPECT_EQ(after, std::vector<uint8_t>(after.size(), 0));
  // The one-slot default of a backend.
  Backend &single = const_cast<Backend &>(f->single->backend());
  EXPECT_EQ(single.maxBatch(), 1);
  EXPECT_ERROR_CONTAINS(single.resetSlot(1),
                        "slot 1 is outside the plan's 1 slots");
}

} // namespace
} // namespace k3
