//===- Differential_test.cpp - The launch-by-launch differential ----------===//
//
// compareOutput and the tolerance table on crafted values; runDifferential
// with a CPU candidate (bit-identical, every fusion strategy's k3c plan of
// both tiny presets) and with a CPU candidate whose reads show one output perturbed
// after one launch of one step, standing in for a wrong CUDA kernel: the
// report must name that launch, step, field and element, keep a perturbation
// within the kernel's tolerance unless the run is exact, and name a write
// outside a launch's outputs.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Differential.h"

#include "kernels/common/BF16.h"
#include "runtime/exec/CpuBackend.h"
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

namespace k3 {
namespace {

template <typename T> std::vector<uint8_t> bytesOf(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint16_t> bf16s(const std::vector<float> &v) {
  std::vector<uint16_t> out;
  for (float f : v)
    out.push_back(floatToBf16(f));
  return out;
}

//===----------------------------------------------------------------------===//
// compareOutput and the table
//===----------------------------------------------------------------------===//

TEST(CompareOutput, Bf16OneUlpIsWithinTheBf16Bound) {
  const std::vector<uint16_t> want = bf16s({1.0f, -2.0f, 0.5f, 3.75f});
  std::vector<uint16_t> got = want;
  got[3] += 1; // one ulp at the largest element: 2^-6 / 3.75 = 4.2e-3
  const Tolerance tol = kernelTolerance("rms_norm", "out", ElemType::BF16);
  ASSERT_FALSE(tol.exact);
  OutputDiff d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 4,
                               ElemType::BF16, tol);
  EXPECT_TRUE(d.ok);
  EXPECT_EQ(d.differing, 1);
  EXPECT_EQ(d.worst, 3);
  EXPECT_DOUBLE_EQ(d.maxAbs, 0.015625);
  EXPECT_DOUBLE_EQ(d.maxRef, 3.75);
  EXPECT_NEAR(d.ratio, 0.015625 / 3.75 / 1e-2, 1e-12);

  d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 4,
                    ElemType::BF16, Tolerance{true, 0, "exact"});
  EXPECT_FALSE(d.ok);
  EXPECT_TRUE(std::isinf(d.ratio));

  got[3] += 4; // five ulps: 2.1e-2 of max|want|
  d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 4,
                    ElemType::BF16, tol);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.worst, 3);
}

TEST(CompareOutput, F32RelativeToTheLargestValue) {
  const std::vector<float> want = {100.0f, 1e-3f, -50.0f};
  std::vector<float> got = want;
  got[1] = 2e-3f; // 100% off itself but 1e-5 of max|want|
  const Tolerance tol = kernelTolerance("linear", "outF32", ElemType::F32);
  EXPECT_DOUBLE_EQ(tol.rel, 1e-4);
  OutputDiff d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 3,
                               ElemType::F32, tol);
  EXPECT_TRUE(d.ok);
  EXPECT_EQ(d.worst, 1);
  got[2] = -50.1f; // 1e-3 of max|want|
  d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 3, ElemType::F32,
                    tol);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.worst, 2);
  EXPECT_NEAR(d.rel, 1e-3, 1e-6);
}

TEST(CompareOutput, NonFiniteAndAllZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tolerance tol{false, 1e-2, "test"};
  std::vector<float> want = {1.0f, 2.0f}, got = {1.0f, nan};
  OutputDiff d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 2,
                               ElemType::F32, tol);
  EXPECT_FALSE(d.ok);
  EXPECT_TRUE(std::isinf(d.maxAbs));
  EXPECT_EQ(d.worst, 1);
  // NaN on both sides is the same value.
  want[1] = nan;
  d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 2, ElemType::F32,
                    tol);
  EXPECT_TRUE(d.ok);
  // An all-zero reference admits nothing else.
  want = {0.0f, 0.0f};
  got = {0.0f, 1e-30f};
  d = compareOutput(bytesOf(want).data(), bytesOf(got).data(), 2, ElemType::F32,
                    tol);
  EXPECT_FALSE(d.ok);
}

TEST(CompareOutput, IdsAreExact) {
  const Tolerance tol = kernelTolerance("router", "outIds", ElemType::I32);
  EXPECT_TRUE(tol.exact);
  const std::vector<int32_t> want = {3, 7, 1}, got = {3, 1, 7};
  const OutputDiff d = compareOutput(bytesOf(want).data(), bytesOf(got).data(),
                                     3, ElemType::I32, tol);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.differing, 2);
  EXPECT_EQ(d.worst, 1);
  EXPECT_EQ(d.want, 7);
  EXPECT_EQ(d.got, 1);
}

TEST(KernelTolerance, EveryOutputOfTheKernelTableHasARow) {
  for (const KernelInfo &k : kernelTable())
    for (const KernelField &f : k.fields) {
      // Collectives never run in a differential check (one rank only).
      if (f.kind != FieldKind::PtrOut || k.collective)
        continue;
      const Tolerance t = kernelTolerance(k.name, f.name, f.elem);
      EXPECT_FALSE(test::contains(t.reason, "(default"))
          << k.name << "." << f.name << " has no row in the tolerance table";
      if (f.elem == ElemType::I32 || f.elem == ElemType::I64) {
        EXPECT_TRUE(t.exact) << k.name << "." << f.name;
      } else if (!t.exact) {
        EXPECT_LE(t.rel, f.elem == ElemType::BF16 ? 1e-2 : 1e-4)
            << k.name << "." << f.name;
      }
    }
  // Kernels the table does not know: by element type.
  EXPECT_DOUBLE_EQ(kernelTolerance("new", "out", ElemType::BF16).rel, 1e-2);
  EXPECT_DOUBLE_EQ(kernelTolerance("new", "out", ElemType::F32).rel, 1e-4);
  EXPECT_TRUE(kernelTolerance("new", "out", ElemType::I64).exact);
}

//===----------------------------------------------------------------------===//
// Whole runs on the CPU backend
//===----------------------------------------------------------------------===//

/// A CPU backend whose reads after launch `launch` at position `pos` show
/// `edit` applied to the arena (or to state `state` when set): to the
/// differential, a kernel that wrote a wrong value.
class PerturbedCpu final : public Backend {
public:
  using Edit = std::function<void(std::vector<uint8_t> &)>;
  PerturbedCpu(std::unique_ptr<CpuBackend> inner, size_t launch, int64_t pos,
               int64_t state, Edit edit)
      : inner_(std::move(inner)), launch_(launch), pos_(pos), state_(state),
        edit_(std::move(edit)) {}

  Status resetState() override { return inner_->resetState(); }
  Status step(int64_t token, int64_t pos) override {
    return inner_->step(token, pos);
  }
  const float *logits() const override { return inner_->logits(); }
  int64_t vocab() const override { return inner_->vocab(); }
  int64_t maxSeq() const override { return inner_->maxSeq(); }
  std::string name() const override { return "cpu (perturbed)"; }
  Status runLaunch(size_t index, int64_t token, int64_t pos) override {
    last_ = index;
    lastPos_ = pos;
    return inner_->runLaunch(index, token, pos);
  }
  Status readArena(std::vector<uint8_t> &out) override {
    K3_RETURN_IF_ERROR(inner_->readArena(out));
    if (hit() && state_ < 0)
      edit_(out);
    return Status::ok();
  }
  Status readState(size_t state, std::vector<uint8_t> &out) override {
    K3_RETURN_IF_ERROR(inner_->readState(state, out));
    if (hit() && state_ == static_cast<int64_t>(state))
      edit_(out);
    return Status::ok();
  }
  Status writeState(size_t state, const std::vector<uint8_t> &b) override {
    return inner_->writeState(state, b);
  }

private:
  /// The edited launch of the edited step; an arena edit stays for the
  /// rest of that step (the launches after it, e.g. the argmax after the
  /// head, see the same values the edited one left).
  bool hit() const {
    return lastPos_ == pos_ &&
           (state_ < 0 ? last_ >= launch_ : last_ == launch_);
  }
  std::unique_ptr<CpuBackend> inner_;
  size_t launch_;
  int64_t pos_, state_;
  Edit edit_;
  size_t last_ = SIZE_MAX;
  int64_t lastPos_ = -1;
};

class DifferentialRun : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    for (const char *preset : {"tiny", "tiny-linear"}) {
      Expected<ModelConfig> c = presetConfig(preset);
      ASSERT_TRUE(c.hasValue());
      ASSERT_TRUE(makeModel(*c, 5, dir->file(preset)).isOk());
    }
  }
  static void TearDownTestSuite() { delete dir; }
  void SetUp() override { K3C_SKIP_WITHOUT_COMPILER(); }

  /// k3c's plan of `preset` (CompiledPlan.h).
  static PlanDoc plan(const std::string &preset,
                      const std::string &fusion = "default",
                      int64_t maxSeq = 32) {
    Expected<PlanDoc> p = test::compiledPresetPlan(preset, fusion, maxSeq);
    EXPECT_TRUE(p.hasValue()) << p.message();
    return p ? p.take() : PlanDoc();
  }
  static TensorStore store(const std::string &preset) {
    Expected<TensorStore> s = TensorStore::open(dir->file(preset));
    EXPECT_TRUE(s.hasValue());
    return s.take();
  }
  /// The index of the first launch of `kernel` with a PtrOut arg `field`.
  static size_t launchOf(const PlanDoc &p, const std::string &kernel,
                         const std::string &field) {
    for (size_t i = 0; i < p.launches.size(); ++i)
      if (p.launches[i].kernel == kernel && p.launches[i].find(field))
        return i;
    ADD_FAILURE() << "no " << kernel << " launch with " << field;
    return 0;
  }

  static test::TempDir *dir;
  const std::vector<int64_t> prompt = {1, 17, 300};
};
test::TempDir *DifferentialRun::dir = nullptr;

TEST_F(DifferentialRun, CpuCandidateIsBitIdenticalAndDecodesAsSession) {
  for (const char *preset : {"tiny", "tiny-linear"})
    for (const char *fusion : test::kFusionStrategies) {
      SCOPED_TRACE(std::string(preset) + " --fusion=" + fusion);
      const PlanDoc p = plan(preset, fusion);
      TensorStore s = store(preset);
      auto be = CpuBackend::bind(p, s);
      ASSERT_TRUE(be.hasValue()) << be.message();
      DifferentialOptions opt;
      opt.exact = true;
      opt.keepLogits = true;
      std::vector<int64_t> seen;
      opt.onToken = [&](int64_t i, int64_t t) {
        EXPECT_EQ(i, static_cast<int64_t>(seen.size()));
        seen.push_back(t);
      };
      auto r = runDifferential(p, s, **be, prompt, 5, opt);
      ASSERT_TRUE(r.hasValue()) << r.message();
      EXPECT_TRUE(r->ok()) << r->summary("cpu");
      EXPECT_TRUE(r->bitIdentical);
      EXPECT_EQ(r->steps, 3 + 5 - 1);
      EXPECT_EQ(r->launchesPerStep, p.launches.size());
      EXPECT_GE(r->outputsCompared,
                r->steps * static_cast<int64_t>(p.launches.size()));
      EXPECT_EQ(seen, r->tokens);
      EXPECT_TRUE(test::contains(r->summary("cpu"), "bit-identical"))
          << r->summary("cpu");

      auto session = Session::open(p, dir->file(preset));
      ASSERT_TRUE(session.hasValue()) << session.message();
      auto g = (*session)->generate(prompt, 5, /*keepLogits=*/true);
      ASSERT_TRUE(g.hasValue()) << g.message();
      EXPECT_EQ(r->tokens, g->tokens);
      EXPECT_EQ(r->logits, g->logits);
    }
}

TEST_F(DifferentialRun, PublishedDtypesBindOnTheReferenceSide) {
  // The reference side binds the checkpoint as the CPU backend does: with
  // the published K3's F32 conv filters and o_norm ("vector" weights) too.
  Expected<ModelConfig> c = presetConfig("tiny");
  ASSERT_TRUE(c.hasValue());
  const std::string path = dir->file("tiny-published");
  ASSERT_TRUE(makeModel(*c, 5, path, {}, 0, Structure::Planted, 0,
                        StoredDtypes::Published)
                  .isOk());
  Expected<TensorStore> s = TensorStore::open(path);
  ASSERT_TRUE(s.hasValue()) << s.message();
  for (const char *fusion : test::kFusionStrategies) {
    const PlanDoc p = plan("tiny", fusion);
    auto be = CpuBackend::bind(p, *s);
    ASSERT_TRUE(be.hasValue()) << be.message();
    DifferentialOptions opt;
    opt.exact = true;
    auto r = runDifferential(p, *s, **be, prompt, 3, opt);
    ASSERT_TRUE(r.hasValue()) << r.message();
    EXPECT_TRUE(r->ok()) << r->summary("cpu");
    EXPECT_TRUE(r->bitIdentical);
  }
}

TEST_F(DifferentialRun, NamesThePerturbedBufferLaunch) {
  const PlanDoc p = plan("tiny");
  TensorStore s = store("tiny");
  const size_t at = launchOf(p, "mla_attend", "out");
  const PlanArg &out = *p.launches[at].find("out");
  const uint64_t byte = p.buffers[out.index].offset + out.offset + 2 * 5;
  auto be = CpuBackend::bind(p, s);
  ASSERT_TRUE(be.hasValue());
  // Element 5 of the attention output, at position 1: one exponent bit.
  PerturbedCpu cand(be.take(), at, 1, -1,
                    [&](std::vector<uint8_t> &a) { a[byte + 1] ^= 0x08; });
  auto r = runDifferential(p, s, cand, prompt, 4);
  ASSERT_TRUE(r.hasValue()) << r.message();
  ASSERT_FALSE(r->ok());
  const LaunchMismatch &m = *r->mismatch;
  EXPECT_EQ(m.launch, at);
  EXPECT_EQ(m.step, 1);
  EXPECT_EQ(m.pos, 1);
  EXPECT_EQ(m.token, prompt[1]);
  EXPECT_EQ(m.kernel, "mla_attend");
  EXPECT_EQ(m.op, p.launches[at].op);
  EXPECT_EQ(m.field, "out");
  EXPECT_EQ(m.target, "buffer '" + p.buffers[out.index].name + "'");
  EXPECT_EQ(m.diff.worst, 5);
  EXPECT_EQ(m.diff.differing, 1);
  EXPECT_FALSE(m.tolerance.exact);
  EXPECT_EQ(r->steps, 2);
  const std::string line = r->summary(cand.name());
  std::printf("  %s\n", line.c_str());
  EXPECT_TRUE(test::contains(line, "FAILED: launch " + std::to_string(at) +
                                       " (mla_attend"))
      << line;
  EXPECT_TRUE(test::contains(line, "step 1 (position 1, token 17)")) << line;
  EXPECT_TRUE(test::contains(line, "field 'out'")) << line;
  EXPECT_TRUE(test::contains(line, "tolerance rel 0.01")) << line;
}

TEST_F(DifferentialRun, NamesThePerturbedState) {
  const PlanDoc p = plan("tiny");
  TensorStore s = store("tiny");
  const size_t at = launchOf(p, "kda_decode", "state");
  const int64_t state = p.launches[at].find("state")->index;
  auto be = CpuBackend::bind(p, s);
  ASSERT_TRUE(be.hasValue());
  // The largest element of the KDA state, 1e-3 larger: ten times the fp32
  // bound.
  int64_t where = -1;
  PerturbedCpu cand(be.take(), at, 2, state, [&](std::vector<uint8_t> &b) {
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    where = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (std::fabs(v[i]) > std::fabs(v[where]))
        where = static_cast<int64_t>(i);
    v[where] *= 1.001f;
    std::memcpy(b.data(), v.data(), b.size());
  });
  auto r = runDifferential(p, s, cand, prompt, 2);
  ASSERT_TRUE(r.hasValue()) << r.message();
  ASSERT_FALSE(r->ok());
  const LaunchMismatch &m = *r->mismatch;
  EXPECT_EQ(m.launch, at);
  EXPECT_EQ(m.step, 2);
  EXPECT_EQ(m.field, "state");
  EXPECT_EQ(m.target, "state '" + p.states[state].name + "'");
  EXPECT_EQ(m.diff.worst, where);
  EXPECT_NEAR(m.diff.rel, 1e-3, 1e-5);
  EXPECT_DOUBLE_EQ(m.tolerance.rel, 1e-4);
  std::printf("  %s\n", r->summary(cand.name()).c_str());
}

TEST_F(DifferentialRun, WithinToleranceUnlessExact) {
  const PlanDoc p = plan("tiny-linear");
  TensorStore s = store("tiny-linear");
  const size_t at = launchOf(p, "linear", "outF32");
  const uint64_t logits = p.buffers[p.logitsBuffer].offset;
  // At the last step (position 3 of 3 + 2 - 1 steps) the logits' largest
  // element moves by 1e-6 of itself: 1% of the fp32 bound.
  auto edit = [&](std::vector<uint8_t> &a) {
    std::vector<float> v(p.config.vocabSize);
    std::memcpy(v.data(), a.data() + logits, v.size() * 4);
    size_t w = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (std::fabs(v[i]) > std::fabs(v[w]))
        w = i;
    v[w] *= 1.000001f;
    std::memcpy(a.data() + logits, v.data(), v.size() * 4);
  };
  for (bool exact : {false, true}) {
    auto be = CpuBackend::bind(p, s);
    ASSERT_TRUE(be.hasValue());
    PerturbedCpu cand(be.take(), at, 3, -1, edit);
    DifferentialOptions opt;
    opt.exact = exact;
    auto r = runDifferential(p, s, cand, prompt, 2, opt);
    ASSERT_TRUE(r.hasValue()) << r.message();
    if (exact) {
      ASSERT_FALSE(r->ok());
      EXPECT_EQ(r->mismatch->launch, at);
      EXPECT_EQ(r->mismatch->field, "outF32");
      EXPECT_TRUE(r->mismatch->tolerance.exact);
    } else {
      EXPECT_TRUE(r->ok()) << r->summary("cpu");
      EXPECT_FALSE(r->bitIdentical);
      EXPECT_GT(r->worstRatio, 0.001);
      EXPECT_LT(r->worstRatio, 0.1);
      EXPECT_EQ(r->worstWhere,
                "launch " + std::to_string(at) + " (linear 'outF32', step 3)");
      EXPECT_TRUE(test::contains(r->summary("cpu"), "within their kernels'"))
          << r->summary("cpu");
      std::printf("  %s\n", r->summary(cand.name()).c_str());
      EXPECT_EQ(r->tokens.size(), 2u);
    }
  }
}

TEST_F(DifferentialRun, NamesAWriteOutsideTheOutputs) {
  const PlanDoc p = plan("tiny");
  TensorStore s = store("tiny");
  ASSERT_EQ(p.launches[0].kernel, "embed");
  const PlanArg &out = *p.launches[0].find("out");
  // The byte after embed's [hidden] bf16 output.
  const uint64_t byte = p.buffers[out.index].offset + out.offset +
                        2 * static_cast<uint64_t>(p.config.hiddenSize);
  ASSERT_LT(byte, p.arenaBytes);
  auto be = CpuBackend::bind(p, s);
  ASSERT_TRUE(be.hasValue());
  PerturbedCpu cand(be.take(), 0, 0, -1,
                    [&](std::vector<uint8_t> &a) { a[byte] ^= 1; });
  auto r = runDifferential(p, s, cand, prompt, 2);
  ASSERT_TRUE(r.hasValue()) << r.message();
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->mismatch->launch, 0u);
  EXPECT_EQ(r->mismatch->field, "(outside its outputs)");
  EXPECT_EQ(r->mismatch->offset, byte);
  EXPECT_EQ(r->mismatch->diff.differing, 1);
  EXPECT_TRUE(test::contains(r->summary("cpu"), "outside the outputs"))
      << r->summary("cpu");
  std::printf("  %s\n", r->summary(cand.name()).c_str());
}

TEST_F(DifferentialRun, RequestErrors) {
  const PlanDoc p = plan("tiny");
  TensorStore s = store("tiny");
  auto be = CpuBackend::bind(p, s);
  ASSERT_TRUE(be.hasValue());
  EXPECT_ERROR_CONTAINS(runDifferential(p, s, **be, {}, 2), "prompt is empty");
  EXPECT_ERROR_CONTAINS(runDifferential(p, s, **be, {1}, 0), "at least 1");
  EXPECT_ERROR_CONTAINS(runDifferential(p, s, **be, {1, 5000}, 2), "id 5000");
  EXPECT_ERROR_CONTAINS(runDifferential(p, s, **be, {1, 2, 3}, 30),
                        "max_seq of 32");
  const PlanDoc other = plan("tiny", "default", 64);
  EXPECT_ERROR_CONTAINS(runDifferential(other, s, **be, {1}, 2),
                        "not bound to this plan");
  EXPECT_ERROR_CONTAINS(checkAgainstCpu(p, dir->file("tiny-linear"),
                                        BackendKind::Cpu, {1}, 2, {}),
                        "different model");
}

} // namespace
} // namespace k3
