//===- kda_chunk_test.cpp - The chunk form of KDA against the recurrence --===//
//
// kdaChunkCpu computes T tokens of the gated delta rule at once (the WY / UT
// form, KdaParams.h), the form a prefill kernel takes; it must equal T
// kda_step calls within fp32 rounding: the state by relative error ≪ 1e-3,
// the bf16 outputs within a rounding step. Fresh random inputs at the
// production head size (d = 128), decays from strong (K3's lower bound −5)
// to weak (long memory), a non-zero start state, chunks of 1 to 64 tokens,
// and a chunk of 64 equal to two of 32. Mutants of the form (a decay
// exponent of the wrong sign, a missing β) must fail the same comparison.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/BF16.h"
#include "kernels/common/CpuMath.h"
#include "kernels/common/VectorRef.h"
#include "kernels/kda/KdaCpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace k3 {
namespace {

struct Inputs {
  int64_t T = 0, H = 0, d = 0;
  std::vector<float> q, k, g, beta, state;
  std::vector<uint16_t> v;
};

/// Random inputs: q, k unit rows (q scaled by 1/sqrt(d)), g = lb · sigmoid(z)
/// with lb = `lowerBound` (−5 strong, −0.05 weak), β = sigmoid(z).
Inputs randomInputs(uint64_t seed, int64_t T, int64_t H, int64_t d,
                    float lowerBound) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Inputs in;
  in.T = T, in.H = H, in.d = d;
  const int64_t C = H * d;
  in.q.resize(T * C), in.k.resize(T * C), in.g.resize(T * C);
  in.v.resize(T * C), in.beta.resize(T * H), in.state.resize(H * d * d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float *q = &in.q[t * C + h * d], *k = &in.k[t * C + h * d];
      float sq = 0, sk = 0;
      for (int64_t c = 0; c < d; ++c) {
        q[c] = n(rng), k[c] = n(rng);
        sq += q[c] * q[c], sk += k[c] * k[c];
      }
      for (int64_t c = 0; c < d; ++c) {
        q[c] /= std::sqrt(sq) * std::sqrt(static_cast<float>(d));
        k[c] /= std::sqrt(sk);
      }
      in.beta[t * H + h] = cpu::sigmoid(n(rng));
    }
  for (int64_t i = 0; i < T * C; ++i) {
    in.g[i] = lowerBound * cpu::sigmoid(n(rng));
    in.v[i] = floatToBf16(n(rng));
  }
  for (float &s : in.state)
    s = 0.1f * n(rng);
  return in;
}

/// The recurrence: kda_step token by token. Returns the bf16 outputs.
std::vector<uint16_t> byTokens(const Inputs &in, std::vector<float> &state) {
  const int64_t C = in.H * in.d;
  std::vector<uint16_t> out(in.T * C);
  for (int64_t t = 0; t < in.T; ++t) {
    KdaStepParams p;
    p.q = &in.q[t * C], p.k = &in.k[t * C], p.v = &in.v[t * C];
    p.g = &in.g[t * C], p.beta = &in.beta[t * in.H];
    p.state = state.data(), p.out = &out[t * C];
    p.numHeads = in.H, p.headDim = in.d;
    kdaStepCpu(p);
  }
  return out;
}

/// The chunk form over tokens [t0, t0 + T).
void byChunk(const Inputs &in, int64_t t0, int64_t T, std::vector<float> &state,
             std::vector<uint16_t> &out) {
  const int64_t C = in.H * in.d;
  KdaChunkParams p;
  p.q = &in.q[t0 * C], p.k = &in.k[t0 * C], p.v = &in.v[t0 * C];
  p.g = &in.g[t0 * C], p.beta = &in.beta[t0 * in.H];
  p.state = state.data(), p.out = &out[t0 * C];
  p.tokens = T, p.numHeads = in.H, p.headDim = in.d;
  kdaChunkCpu(p);
}

/// max |a − b| / max |a|.
template <typename A, typename B> double relError(size_t n, A a, B b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(a(i) - b(i)));
    scale = std::max(scale, std::fabs(a(i)));
  }
  return scale > 0 ? err / scale : err;
}

struct Compared {
  double state = 0, out = 0;
};

Compared compare(const Inputs &in, const std::vector<float> &wantState,
                 const std::vector<uint16_t> &wantOut,
                 const std::vector<float> &gotState,
                 const std::vector<uint16_t> &gotOut) {
  Compared c;
  c.state = relError(
      wantState.size(), [&](size_t i) { return double(wantState[i]); },
      [&](size_t i) { return double(gotState[i]); });
  c.out = relError(
      wantOut.size(), [&](size_t i) { return double(bf16ToFloat(wantOut[i])); },
      [&](size_t i) { return double(bf16ToFloat(gotOut[i])); });
  (void)in;
  return c;
}

TEST(KdaChunk, EqualsTheRecurrence) {
  for (float lb : {-5.0f, -0.05f})
    for (int64_t T : {1, 2, 7, 33, 64}) {
      const Inputs in = randomInputs(1000 + T, T, 2, 128, lb);
      std::vector<float> want = in.state, got = in.state;
      const std::vector<uint16_t> wantOut = byTokens(in, want);
      std::vector<uint16_t> gotOut(wantOut.size(), 0x7fc0); // poisoned: NaN
      byChunk(in, 0, T, got, gotOut);
      const Compared c = compare(in, want, wantOut, got, gotOut);
      EXPECT_LT(c.state, 1e-5) << "lb " << lb << ", T " << T;
      EXPECT_LT(c.out, 1e-2) << "lb " << lb << ", T " << T;
      // The outputs differ by at most a rounding step or two: most are equal.
      int64_t same = 0;
      for (size_t i = 0; i < wantOut.size(); ++i)
        same += wantOut[i] == gotOut[i];
      EXPECT_GT(same, static_cast<int64_t>(wantOut.size()) * 9 / 10)
          << "lb " << lb << ", T " << T;
    }
}

TEST(KdaChunk, ChunksCompose) {
  const Inputs in = randomInputs(7, 64, 3, 128, -1.0f);
  std::vector<float> one = in.state, two = in.state;
  std::vector<uint16_t> oneOut(64 * 3 * 128), twoOut(oneOut.size());
  byChunk(in, 0, 64, one, oneOut);
  byChunk(in, 0, 32, two, twoOut);
  byChunk(in, 32, 32, two, twoOut);
  const Compared c = compare(in, one, oneOut, two, twoOut);
  EXPECT_LT(c.state, 1e-5);
  EXPECT_LT(c.out, 1e-2);
}

/// The comparison can fail: the chunk form's own ingredients, each made
/// wrong on the inputs, give a result the tolerances refuse.
TEST(KdaChunk, TheCheckCanFail) {
  const Inputs in = randomInputs(3, 16, 1, 128, -0.5f);
  std::vector<float> want = in.state;
  const std::vector<uint16_t> wantOut = byTokens(in, want);
  // β of one token halved; the decay of one token dropped; one value token
  // shifted. Each is a different bug a chunk kernel can have.
  for (int which = 0; which < 3; ++which) {
    Inputs bad = in;
    if (which == 0)
      bad.beta[5] *= 0.5f;
    else if (which == 1)
      std::fill(bad.g.begin() + 9 * 128, bad.g.begin() + 10 * 128, 0.0f);
    else
      std::rotate(bad.v.begin() + 4 * 128, bad.v.begin() + 5 * 128,
                  bad.v.begin() + 6 * 128);
    std::vector<float> got = in.state;
    std::vector<uint16_t> gotOut(wantOut.size());
    byChunk(bad, 0, 16, got, gotOut);
    const Compared c = compare(in, want, wantOut, got, gotOut);
    EXPECT_TRUE(c.state > 1e-3 || c.out > 1e-2) << which;
  }
}


/// A sequence's worth of kda_decode rows (Kimi-Linear's head size, the
/// low-rank f and output-gate projections folded in): every row its own
/// inputs and outputs, all sharing one state and conv state set.
struct DecodeRows {
  int64_t T, H, d, C, W = 4, rank = 16;
  std::vector<uint16_t> uq, uk, uv, beta, fA, fB, gA, gB, gateOut, out;
  std::vector<uint16_t> convW, normW;
  std::vector<float> dtBias, aLog, state, convQ, convK, convV;
  DecodeRows(uint64_t seed, int64_t T, int64_t H, int64_t d)
      : T(T), H(H), d(d), C(H * d) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    auto bf16s = [&](size_t count, float stdv) {
      std::vector<uint16_t> v(count);
      for (uint16_t &x : v)
        x = floatToBf16(stdv * n(rng));
      return v;
    };
    auto floats = [&](size_t count, float stdv) {
      std::vector<float> v(count);
      for (float &x : v)
        x = stdv * n(rng);
      return v;
    };
    uq = bf16s(T * C, 1.0f), uk = bf16s(T * C, 1.0f), uv = bf16s(T * C, 1.0f);
    beta = bf16s(T * H, 1.0f);
    fA = bf16s(T * rank, 1.0f), fB = bf16s(C * rank, 0.3f);
    gA = bf16s(T * rank, 1.0f), gB = bf16s(C * rank, 0.3f);
    convW = bf16s(C * W, 0.5f), normW = bf16s(d, 1.0f);
    dtBias = floats(C, 1.0f), aLog = floats(H, 0.5f);
    state = floats(H * d * d, 0.1f);
    convQ = floats(C * (W - 1), 1.0f), convK = floats(C * (W - 1), 1.0f);
    convV = floats(C * (W - 1), 1.0f);
    gateOut.assign(T * C, 0x7fc0);
    out.assign(T * C, 0x7fc0); // poisoned: NaN
  }
  KdaDecodeParams row(int64_t t) {
    KdaDecodeParams p;
    p.uq = &uq[t * C], p.uk = &uk[t * C], p.uv = &uv[t * C];
    p.convQ = bf16Vector(convW.data());
    p.convK = bf16Vector(convW.data());
    p.convV = bf16Vector(convW.data());
    p.convStateQ = convQ.data(), p.convStateK = convK.data();
    p.convStateV = convV.data();
    p.betaLogit = &beta[t * H];
    p.dtBias = dtBias.data(), p.aLog = aLog.data();
    p.state = state.data();
    p.normWeight = bf16Vector(normW.data());
    p.out = &out[t * C];
    p.numHeads = H, p.headDim = d, p.convWidth = static_cast<int32_t>(W);
    p.fA = &fA[t * rank], p.fB = fB.data(), p.fRank = rank;
    p.gA = &gA[t * rank], p.gB = gB.data(), p.gRank = rank;
    p.gateOut = &gateOut[t * C];
    return p;
  }
};

/// Runs `form` (kdaDecodeChunkCpu or kdaDecodeRowsChunkCpu) over `rows`.
void runRows(void (*form)(const KdaDecodeParams *const *, size_t),
             const std::vector<KdaDecodeParams> &rows) {
  std::vector<const KdaDecodeParams *> ptrs;
  for (const KdaDecodeParams &r : rows)
    ptrs.push_back(&r);
  form(ptrs.data(), ptrs.size());
}

/// Rows [t0, t1) of `in`.
std::vector<KdaDecodeParams> rowsOf(DecodeRows &in, int64_t t0, int64_t t1) {
  std::vector<KdaDecodeParams> rows;
  for (int64_t t = t0; t < t1; ++t)
    rows.push_back(in.row(t));
  return rows;
}

/// kda_decode's chunk form over a prompt chunk's rows equals the rows one by
/// one within fp32 rounding: the outputs, the state, and the conv states
/// exactly (they advance token by token in both).
TEST(KdaChunk, DecodeChunkEqualsDecodeRowByRow) {
  for (int64_t T : {2, 16, 64}) {
    DecodeRows want(77 + T, T, 2, 128), got(77 + T, T, 2, 128);
    for (int64_t t = 0; t < T; ++t)
      kdaDecodeCpu(want.row(t));
    runRows(kdaDecodeChunkCpu, rowsOf(got, 0, T));
    EXPECT_EQ(got.convQ, want.convQ) << T;
    EXPECT_EQ(got.convV, want.convV) << T;
    EXPECT_EQ(got.gateOut, want.gateOut) << T;
    EXPECT_LT(relError(
                  want.state.size(),
                  [&](size_t i) { return double(want.state[i]); },
                  [&](size_t i) { return double(got.state[i]); }),
              1e-5)
        << T;
    int64_t same = 0, near = 0;
    for (size_t i = 0; i < want.out.size(); ++i) {
      same += want.out[i] == got.out[i];
      near += std::fabs(bf16ToFloat(want.out[i]) - bf16ToFloat(got.out[i])) <=
              std::fabs(bf16ToFloat(want.out[i])) / 64;
    }
    EXPECT_EQ(near, static_cast<int64_t>(want.out.size())) << T;
    EXPECT_GT(same, static_cast<int64_t>(want.out.size()) * 9 / 10) << T;
  }
}

/// The rows form splits a step's rows into runs of one state: two
/// sequences' rows (a run of 5, a single row, a run of 3) give what each
/// sequence's rows give alone; merging the two sequences' runs into one
/// chunk (the mutant a wrong split would be) does not.
TEST(KdaChunk, RowsFormRunsEachSequenceApart) {
  DecodeRows a(5, 6, 2, 128), b(6, 3, 2, 128);
  DecodeRows a2(5, 6, 2, 128), b2(6, 3, 2, 128);
  // Alone: a's rows 0-4 as a chunk then row 5; b's 3 rows as a chunk.
  runRows(kdaDecodeChunkCpu, rowsOf(a, 0, 5));
  kdaDecodeCpu(a.row(5));
  runRows(kdaDecodeChunkCpu, rowsOf(b, 0, 3));
  // One step: a0-a4, b0, ... interleaved runs must not mix: a0..a4 | b0..b2
  // | a5 (a5's state is a's: a run of its own after b's).
  std::vector<KdaDecodeParams> rows = rowsOf(a2, 0, 5);
  for (const KdaDecodeParams &r : rowsOf(b2, 0, 3))
    rows.push_back(r);
  rows.push_back(a2.row(5));
  runRows(kdaDecodeRowsChunkCpu, rows);
  EXPECT_EQ(a2.out, a.out);
  EXPECT_EQ(b2.out, b.out);
  EXPECT_EQ(a2.state, a.state);
  EXPECT_EQ(b2.state, b.state);

  // The mutant: a's first 5 rows and b's 3 as one chunk on a's state.
  DecodeRows a3(5, 6, 2, 128), b3(6, 3, 2, 128);
  std::vector<KdaDecodeParams> mixed = rowsOf(a3, 0, 5);
  for (KdaDecodeParams r : rowsOf(b3, 0, 3)) {
    r.state = a3.state.data();
    mixed.push_back(r);
  }
  runRows(kdaDecodeChunkCpu, mixed);
  EXPECT_NE(b3.out, b.out);
}

} // namespace
} // namespace k3
