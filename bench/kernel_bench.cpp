//===- kernel_bench.cpp - The CUDA kernels at Kimi K3's sizes -------------===//
//
// Times each decode kernel at the real K3 shapes on random data in device
// memory and prints one row per case: median µs over many runs (CUDA
// events around each launch, after warm-up), the bytes the kernel must move
// (its floor), the achieved GB/s and its fraction of the device-to-device
// copy bandwidth measured in the same process (or of --peak-gbps). Weights
// are sized so the data does not stay in the 60 MB L2 between runs (several
// copies are rotated where one would fit).
//
//   kernel_bench [--peak-gbps G] [--runs 200] [--json FILE] [--only NAME]
//                [--trace]
//
// --only NAME runs the cases whose name contains NAME (linear, linear_rows,
// linear_rows_mma, kda, mla-HEADS-ROWS, router, gated_mlp, moe, norm, ...);
// a NAME that matches none exits 2 with the list.
//
// Needs a GPU; exits 0 with a message where there is none.
//
//===----------------------------------------------------------------------===//
#include "kernels/attnres/AttnResParams.h"
#include "kernels/common/BF16.h"
#include "kernels/common/MXFP4.h"
#include "kernels/common/TraceEvent.h"
#include "kernels/common/VectorRef.h"
#include "kernels/gemv/GemvParams.h"
#include "kernels/kda/KdaParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"
#include "kernels/norm/NormParams.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/exec/cuda/CudaDriver.h"
#include "runtime/exec/cuda/RowsForms.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace k3;

namespace {

cuda::Driver *gDriver = nullptr;
int gRuns = 200;

/// Device memory that lives until the end of the program.
std::vector<cuda::DeviceBuffer> gKeep;

/// `bytes` of device memory filled with random bf16 N(0, std) values (or
/// random bytes), generated on the host once per size and reused.
void *randomDevice(size_t bytes, float std = 1.0f, bool rawBytes = false) {
  static std::mt19937_64 gen(42);
  std::vector<uint8_t> host(bytes);
  if (rawBytes) {
    for (auto &b : host)
      b = static_cast<uint8_t>(gen() & 0x77); // finite E2M1 codes / scales
  } else {
    std::normal_distribution<float> d(0.0f, std);
    uint16_t *h = reinterpret_cast<uint16_t *>(host.data());
    for (size_t i = 0; i < bytes / 2; ++i)
      h[i] = floatToBf16(d(gen));
  }
  auto b = cuda::DeviceBuffer::upload(host.data(), bytes);
  if (!b) {
    std::fprintf(stderr, "kernel_bench: %s\n", b.message().c_str());
    std::exit(1);
  }
  gKeep.push_back(b.take());
  return gKeep.back().as<void>();
}

/// An MXFP4 scale array of plausible exponents (2^-8 .. 2^-4).
void *scalesDevice(size_t n) {
  std::vector<uint8_t> host(n);
  for (size_t i = 0; i < n; ++i)
    host[i] = static_cast<uint8_t>(119 + i % 5);
  auto b = cuda::DeviceBuffer::upload(host.data(), n);
  gKeep.push_back(b.take());
  return gKeep.back().as<void>();
}

void *zerosDevice(size_t bytes) {
  auto b = cuda::DeviceBuffer::create(bytes);
  gKeep.push_back(b.take());
  if (!gDriver->memset8(gKeep.back().get(), 0, bytes).isOk())
    std::exit(1);
  return gKeep.back().as<void>();
}

/// A copy of `v` in device memory that lives until the end of the program
/// (weight tables, fixed router outputs).
template <typename T> const T *uploadDevice(const std::vector<T> &v) {
  auto b = cuda::DeviceBuffer::upload(v.data(), v.size() * sizeof(T));
  if (!b) {
    std::fprintf(stderr, "kernel_bench: %s\n", b.message().c_str());
    std::exit(1);
  }
  gKeep.push_back(b.take());
  return gKeep.back().as<const T>();
}

struct Result {
  std::string name;
  double us = 0;
  double bytes = 0;
};

/// Median time of `launch(i)` over gRuns runs (i rotates weight copies).
template <typename Params>
bool timeKernel(const std::string &kernel, std::vector<Params> variants,
                int64_t grid, double &medianUs, int64_t block = 256,
                int64_t smem = 0, int64_t clusterX = 1) {
  Expected<cuda::CUfunction> f = findCudaKernel(kernel);
  if (!f) {
    std::fprintf(stderr, "  %s: %s\n", kernel.c_str(), f.message().c_str());
    return false;
  }
  if (smem > 0) {
    Expected<int64_t> most = gDriver->allowDynamicShared(*f);
    if (!most || *most < smem) {
      std::fprintf(stderr, "  %s: %lld bytes of shared memory: %s\n",
                   kernel.c_str(), static_cast<long long>(smem),
                   most ? "more than the device allows" : most.message().c_str());
      return false;
    }
  }
  Expected<cuda::CUevent> e0 = gDriver->createEvent(),
                          e1 = gDriver->createEvent();
  const int64_t g[3] = {grid, 1, 1}, b[3] = {block, 1, 1},
                cl[3] = {clusterX, 1, 1};
  std::vector<float> ms;
  for (int i = -10; i < gRuns; ++i) {
    Params &p = variants[static_cast<size_t>((i + 10)) % variants.size()];
    if (!gDriver->record(*e0, nullptr).isOk() ||
        !gDriver->launch(*f, g, b, smem, nullptr, &p, false, cl).isOk() ||
        !gDriver->record(*e1, nullptr).isOk())
      return false;
    Expected<float> t = gDriver->elapsedMs(*e0, *e1);
    if (!t) {
      std::fprintf(stderr, "  %s: %s\n", kernel.c_str(), t.message().c_str());
      return false;
    }
    if (i >= 0)
      ms.push_back(*t);
  }
  std::sort(ms.begin(), ms.end());
  medianUs = ms[ms.size() / 2] * 1000.0;
  return true;
}

/// Copies of a weight so the rotation exceeds the L2 (60 MB on H200).
int copiesFor(double bytes) {
  return std::max(1, std::min(8, static_cast<int>(200e6 / bytes) + 1));
}

// K3 sizes (K3.md §1).
constexpr int64_t D = 7168, C = 12288, H = 96, Dh = 128;
constexpr int64_t L = 512, R = 64, P = 128, V = 128, N = 96;
constexpr int64_t Dm = 3584, I = 3072, E = 896, TopK = 16;

void benchLinear(std::vector<Result> &out, const std::string &label, int64_t n,
                 int64_t k, bool mxfp4, bool f32Out) {
  const double wBytes = mxfp4 ? n * k / 2.0 + n * k / 32.0 : n * k * 2.0;
  std::vector<LinearParams> vs;
  void *x = randomDevice(k * 2);
  void *y = zerosDevice(n * 4);
  for (int c = 0; c < copiesFor(wBytes); ++c) {
    LinearParams p;
    p.x = static_cast<uint16_t *>(x);
    p.n = n;
    p.k = k;
    if (mxfp4) {
      p.w.format = kWeightMxfp4;
      p.w.packed = static_cast<uint8_t *>(randomDevice(n * k / 2, 1, true));
      p.w.scale = static_cast<uint8_t *>(scalesDevice(n * k / 32));
    } else {
      p.w.bf16 = static_cast<uint16_t *>(randomDevice(n * k * 2, 0.01f));
    }
    if (f32Out)
      p.outF32 = static_cast<float *>(y);
    else
      p.out = static_cast<uint16_t *>(y);
    vs.push_back(p);
  }
  double us;
  // The plan's grid (codegen gemvGrid without a norm).
  if (timeKernel("linear", vs, std::max<int64_t>((n + 7) / 8, 264), us))
    out.push_back({label, us, wBytes + k * 2.0 + n * (f32Out ? 4.0 : 2.0)});
}

/// k3_linear_rows over `tokens` tokens (a decode batch or a prompt chunk):
/// the bytes are the weights once per pass of kGemvRowsPerPass tokens plus
/// the activations, so "of copy" says how near the HBM floor of the passes
/// the launch is; the label gives µs per token too.
void benchLinearRows(std::vector<Result> &out, const std::string &label,
                     int64_t n, int64_t k, int tokens) {
  const double wBytes = n * k * 2.0;
  const int passes = (tokens + kGemvRowsPerPass - 1) / kGemvRowsPerPass;
  std::vector<LinearRowsParams> vs;
  void *x = randomDevice(tokens * k * 2);
  void *y = zerosDevice(tokens * n * 2);
  for (int c = 0; c < copiesFor(wBytes); ++c) {
    LinearRowsParams p;
    p.one.x = static_cast<uint16_t *>(x);
    p.one.n = n;
    p.one.k = k;
    p.one.w.bf16 = static_cast<uint16_t *>(randomDevice(n * k * 2, 0.01f));
    p.one.out = static_cast<uint16_t *>(y);
    p.rows = tokens;
    p.xStride = k;
    p.outStride = n;
    vs.push_back(p);
  }
  double us;
  if (timeKernel("linear_rows", vs, std::max<int64_t>((n + 7) / 8, 264), us,
                 256, gemvRowsSmemBytes(k, tokens))) {
    char name[128];
    std::snprintf(name, sizeof name, "%s x%d (%.2f us/token)", label.c_str(),
                  tokens, us / tokens);
    out.push_back({name, us, wBytes * passes + tokens * (k + n) * 2.0});
  }
}

/// The tensor-core forms of k3_linear_rows for `tokens` rows of a decode
/// batch or prompt chunk (the wide tile k3_linear_rows_mma, or with
/// `narrow` k3_linear_rows_mma16), launched as the CUDA backend launches
/// them (RowsForms.h mmaRowsLaunch / mma16RowsLaunch over rows one arena
/// apart; no pre-norm): the bytes are the weights once plus the rows'
/// activations.
void benchLinearRowsTensor(std::vector<Result> &out, const std::string &label,
                           int64_t n, int64_t k, int tokens, bool narrow,
                           bool f32Out = false) {
  const double wBytes = n * k * 2.0;
  const uint64_t outAt = static_cast<uint64_t>(k) * 2;
  const uint64_t stride = (outAt + n * 4 + 255) / 256 * 256;
  auto *arena = static_cast<uint8_t *>(randomDevice(tokens * stride));
  const int64_t sms = gDriver->smCount();
  std::vector<std::vector<uint8_t>> variants;
  std::vector<Mma16Launch> narrows;
  RowsLaunch shape;
  for (int c = 0; c < copiesFor(wBytes); ++c) {
    const auto *w = static_cast<uint16_t *>(randomDevice(n * k * 2, 0.01f));
    std::vector<LinearParams> rows(tokens);
    std::vector<const void *> ptrs;
    for (int t = 0; t < tokens; ++t) {
      LinearParams &p = rows[t];
      p.x = reinterpret_cast<const uint16_t *>(arena + t * stride);
      p.w.bf16 = w;
      p.n = n;
      p.k = k;
      if (f32Out)
        p.outF32 = reinterpret_cast<float *>(arena + t * stride + outAt);
      else
        p.out = reinterpret_cast<uint16_t *>(arena + t * stride + outAt);
      ptrs.push_back(&p);
    }
    if (narrow) {
      std::optional<Mma16Launch> m = mma16RowsLaunch(
          "linear", ptrs, sizeof(LinearParams), stride, sms, 227 * 1024);
      if (!m)
        return;
      shape = m->launch;
      narrows.push_back(*m);
    } else {
      std::optional<RowsLaunch> m =
          mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), stride, sms);
      if (!m)
        return;
      shape = *m;
      variants.push_back(m->params);
    }
  }
  double us = 0;
  bool ok = false;
  if (narrow) {
    // One scratch for every copy: a launch leaves its counters at zero.
    const uint64_t partials = reinterpret_cast<uintptr_t>(
        zerosDevice(std::max<uint64_t>(narrows[0].partialBytes, 16)));
    const uint64_t counters = reinterpret_cast<uintptr_t>(
        zerosDevice(std::max<uint64_t>(narrows[0].counterBytes, 16)));
    std::vector<LinearRowsMma16Params> vs;
    for (Mma16Launch &m : narrows) {
      bindMma16Scratch(m, partials, counters);
      LinearRowsMma16Params p;
      std::memcpy(&p, m.launch.params.data(), sizeof(p));
      vs.push_back(p);
    }
    ok = timeKernel("linear_rows_mma16", vs, shape.grid[0], us, shape.block[0],
                    shape.smem);
  } else {
    std::vector<LinearRowsParams> vs;
    for (const std::vector<uint8_t> &v : variants) {
      LinearRowsParams p;
      std::memcpy(&p, v.data(), sizeof(p));
      vs.push_back(p);
    }
    ok = timeKernel("linear_rows_mma", vs, shape.grid[0], us, shape.block[0],
                    shape.smem, shape.cluster[0]);
  }
  if (ok) {
    char name[160];
    std::snprintf(name, sizeof name, "%s x%d %s (grid %lld)", label.c_str(),
                  tokens, narrow ? "mma16" : "mma",
                  static_cast<long long>(shape.grid[0]));
    out.push_back(
        {name, us, wBytes + tokens * (k * 2.0 + n * (f32Out ? 4 : 2))});
  }
}

void benchKda(std::vector<Result> &out) {
  const double stateBytes = H * Dh * Dh * 4.0;
  std::vector<KdaDecodeParams> vs;
  for (int c = 0; c < copiesFor(2 * stateBytes); ++c) {
    KdaDecodeParams p;
    p.uq = static_cast<uint16_t *>(randomDevice(C * 2));
    p.uk = static_cast<uint16_t *>(randomDevice(C * 2));
    p.uv = static_cast<uint16_t *>(randomDevice(C * 2));
    // bf16 filters and o_norm (Kimi-Linear's form; K3 stores them f32: a
    // few hundred KB more per layer, next to the 12 MiB of state traffic).
    p.convQ =
        bf16Vector(static_cast<uint16_t *>(randomDevice(C * 4 * 2, 0.5f)));
    p.convK =
        bf16Vector(static_cast<uint16_t *>(randomDevice(C * 4 * 2, 0.5f)));
    p.convV =
        bf16Vector(static_cast<uint16_t *>(randomDevice(C * 4 * 2, 0.5f)));
    p.convStateQ = static_cast<float *>(zerosDevice(C * 3 * 4));
    p.convStateK = static_cast<float *>(zerosDevice(C * 3 * 4));
    p.convStateV = static_cast<float *>(zerosDevice(C * 3 * 4));
    p.f = static_cast<uint16_t *>(randomDevice(C * 2, 0.5f));
    p.betaLogit = static_cast<uint16_t *>(randomDevice(H * 2));
    p.dtBias = static_cast<float *>(zerosDevice(C * 4));
    p.aLog = static_cast<float *>(zerosDevice(H * 4));
    p.state = static_cast<float *>(zerosDevice(H * Dh * Dh * 4));
    p.gate = static_cast<uint16_t *>(randomDevice(C * 2));
    p.normWeight = bf16Vector(static_cast<uint16_t *>(randomDevice(Dh * 2)));
    p.out = static_cast<uint16_t *>(zerosDevice(C * 2));
    p.numHeads = H;
    p.headDim = Dh;
    p.hasLowerBound = 1;
    vs.push_back(p);
  }
  double us;
  // The plan's grid: one block per (head, 32 value columns).
  const double bytes = 2 * stateBytes + C * 2.0 * 6 + C * 4 * 3 * 2.0 * 3;
  if (timeKernel("kda_decode", vs, H * (Dh / 32), us))
    out.push_back({"kda_decode 96x128 (state r+w)", us, bytes});
  // Smaller slices (the slice width follows the block size): more blocks
  // stream the state at once.
  if (timeKernel("kda_decode", vs, H * (Dh / 16), us, /*block=*/128))
    out.push_back({"kda_decode, 128-thread blocks x 768", us, bytes});
  if (timeKernel("kda_decode", vs, H * (Dh / 8), us, /*block=*/64))
    out.push_back({"kda_decode, 64-thread blocks x 1536", us, bytes});
}

/// `--trace`: print the timeline of a traced build (printTrace).
bool gTrace = false;

/// Launches `kernel` three times (variants 0..2) with a -DK3C_KERNEL_TRACE
/// build of its family (K3C_PTX_DIR) and prints each launch's timeline:
/// per kind (and slot, where `bySlot` says so) the items, first draw, last
/// finish, mean and max span; then how many blocks are inside an item of a
/// kind below `itemKinds`, per 2 µs.
template <typename Params, typename BySlot>
void printTrace(const std::string &kernel, std::vector<Params> &variants,
                int64_t grid, const std::vector<std::string> &kinds,
                uint32_t itemKinds, BySlot bySlot, int64_t clusterX = 1) {
  auto count = findCudaGlobal(kernel, "gTraceCount");
  auto events = findCudaGlobal(kernel, "gTrace");
  if (!count || !events) {
    std::printf("trace: the %s module has no trace buffer (build it with "
                "-DK3C_KERNEL_TRACE and point K3C_PTX_DIR at it)\n",
                kernel.c_str());
    return;
  }
  for (int run = 0; run < 3; ++run) {
    if (!gDriver->memset8(count->first, 0, 4).isOk())
      std::exit(1);
    Expected<cuda::CUfunction> f = findCudaKernel(kernel);
    const int64_t g[3] = {grid, 1, 1}, b[3] = {256, 1, 1},
                  cl[3] = {clusterX, 1, 1};
    Params p = variants[static_cast<size_t>(run) % variants.size()];
    if (!f || !gDriver->launch(*f, g, b, 0, nullptr, &p, false, cl).isOk() ||
        !gDriver->synchronize(nullptr).isOk())
      std::exit(1);
    unsigned n = 0;
    if (!gDriver->copyToHost(&n, count->first, 4).isOk())
      std::exit(1);
    n = std::min<unsigned>(
        n, static_cast<unsigned>(events->second / sizeof(TraceEvent)));
    std::vector<TraceEvent> ev(n);
    if (!gDriver->copyToHost(ev.data(), events->first, n * sizeof(TraceEvent))
             .isOk())
      std::exit(1);
    uint64_t t0 = ~uint64_t(0), tEnd = 0;
    for (const TraceEvent &e : ev)
      t0 = std::min(t0, e.t0), tEnd = std::max(tEnd, e.t1);
    auto rel = [&](uint64_t t) { return (t - t0) / 1000.0; };
    std::printf("trace of %s run %d: %u events over %.2f us\n", kernel.c_str(),
                run, n, rel(tEnd));
    std::map<std::pair<unsigned, unsigned>, std::vector<const TraceEvent *>>
        groups;
    for (const TraceEvent &e : ev)
      groups[{e.kind, bySlot(e.kind) ? e.slot : 0}].push_back(&e);
    std::printf("  %-9s %4s %6s %9s %9s %9s %9s %9s\n", "kind", "slot",
                "items", "first us", "last us", "mean us", "max us",
                "1st end");
    for (auto &[key, list] : groups) {
      double first = 1e30, last = 0, sum = 0, mx = 0, firstEnd = 1e30;
      for (const TraceEvent *e : list) {
        first = std::min(first, rel(e->t0));
        last = std::max(last, rel(e->t1));
        firstEnd = std::min(firstEnd, rel(e->t1));
        const double d = (e->t1 - e->t0) / 1000.0;
        sum += d, mx = std::max(mx, d);
      }
      std::printf("  %-9s %4u %6zu %9.2f %9.2f %9.2f %9.2f %9.2f\n",
                  key.first < kinds.size() ? kinds[key.first].c_str() : "?",
                  key.second, list.size(), first, last, sum / list.size(), mx,
                  firstEnd);
    }
    std::printf("  blocks in an item (or spinning in one), per 2 us:");
    for (double t = 0; t < rel(tEnd); t += 2) {
      int busy = 0;
      for (const TraceEvent &e : ev)
        if (e.kind < itemKinds && rel(e.t0) <= t + 1 && rel(e.t1) >= t + 1)
          ++busy;
      std::printf(" %d", busy);
    }
    std::printf("\n");
  }
}

/// mla_attend over `heads` heads (K3: 96, Kimi-Linear: 32; P, R, L, V as
/// in both) at a context of `length` cache rows, with the plan's grid (the
/// all-heads form: one block per SM, codegen mlaAttendGrid).
void benchMla(std::vector<Result> &out, int64_t heads, int64_t length) {
  const double kvBBytes = heads * (P + V) * L * 2.0;
  const double cacheBytes = length * (L + R) * 2.0;
  std::vector<MlaAttendParams> vs;
  void *q = randomDevice(heads * (P + R) * 2);
  void *gate = randomDevice(heads * V * 2);
  void *o = zerosDevice(heads * V * 2);
  for (int c = 0; c < copiesFor(kvBBytes + cacheBytes); ++c) {
    MlaAttendParams p;
    p.q = static_cast<uint16_t *>(q);
    p.kvB = static_cast<uint16_t *>(randomDevice(kvBBytes, 0.05f));
    p.cache = static_cast<uint16_t *>(randomDevice(cacheBytes));
    p.length = length;
    p.gate = static_cast<uint16_t *>(gate);
    p.out = static_cast<uint16_t *>(o);
    p.numHeads = heads;
    p.nopeDim = P;
    p.ropeDim = R;
    p.vDim = V;
    p.kvLoraRank = L;
    p.scale = 1.0f / 13.856406f;
    vs.push_back(p);
  }
  double us = 0;
  const std::string label = "mla_attend " + std::to_string(heads) +
                            " heads, ctx " + std::to_string(length);
  if (timeKernel("mla_attend", vs, 132, us))
    out.push_back({label, us, kvBBytes + cacheBytes});
  // The per-head form's grid (a block per head and split of the rows) too:
  // what the per-head form took before the all-heads form, in a variant
  // build that keeps it (K3C_TUNE_MLA_ALL_HEADS_MIN_ROWS).
  const int64_t splits = std::clamp<int64_t>(
      length / std::max<int64_t>(256, 8 * heads), 1, 16);
  if (timeKernel("mla_attend", vs, heads * splits, us))
    out.push_back({label + ", grid " + std::to_string(heads * splits), us,
                   kvBBytes + cacheBytes});
  // mla_attend_clustered (codegen mlaAttendCluster: a cluster of
  // kMlaClusterBlocks blocks per head, two per SM, in plans of at most 4096
  // rows).
  const int64_t C = kMlaClusterBlocks;
  const bool clustered = heads * C <= 2 * 132 && length <= 4096;
  if (clustered &&
      timeKernel("mla_attend_clustered", vs, heads * C, us, 256, 0, C))
    out.push_back({label + ", clusters of " + std::to_string(C), us,
                   kvBBytes + cacheBytes});
  const std::vector<std::string> kinds = {
      "q-hat",  "range",   "merge",    "out",      "start",
      "waited", "h:q-hat", "h:merged", "h:splits", "h:out"};
  auto bySlot = [](uint32_t kind) { return kind == kMlaTraceWaited; };
  if (gTrace) {
    printTrace("mla_attend", vs, 132, kinds, /*itemKinds=*/kMlaTraceStart,
               bySlot);
    if (clustered)
      printTrace("mla_attend_clustered", vs, heads * C, kinds,
                 /*itemKinds=*/kMlaTraceStart, bySlot, C);
  }
}

void benchRouter(std::vector<Result> &out) {
  std::vector<RouterParams> vs;
  void *h = randomDevice(D * 2);
  void *ids = zerosDevice(TopK * 4), *w = zerosDevice(TopK * 4);
  for (int c = 0; c < copiesFor(E * D * 2.0); ++c) {
    RouterParams p;
    p.h = static_cast<uint16_t *>(h);
    p.gate = static_cast<uint16_t *>(randomDevice(E * D * 2, 0.02f));
    p.numExperts = E;
    p.dim = D;
    p.topK = TopK;
    p.outIds = static_cast<int32_t *>(ids);
    p.outWeights = static_cast<float *>(w);
    vs.push_back(p);
  }
  double us;
  if (timeKernel("router", vs, (E + 7) / 8, us)) // the plan's grid
    out.push_back({"router 896 x 7168, top-16", us, E * D * 2.0});
}

void benchMoe(std::vector<Result> &out) {
  // A table of 32 MXFP4 experts; the ids pick 16 of them.
  const int64_t tableE = 32;
  auto mx = [&](int64_t rows, int64_t cols) {
    WeightRef w;
    w.format = kWeightMxfp4;
    w.packed = static_cast<uint8_t *>(randomDevice(rows * cols / 2, 1, true));
    w.scale = static_cast<uint8_t *>(scalesDevice(rows * cols / 32));
    return w;
  };
  std::vector<WeightRef> w1, w3, w2;
  for (int64_t e = 0; e < tableE; ++e) {
    w1.push_back(mx(I, Dm));
    w3.push_back(mx(I, Dm));
    w2.push_back(mx(Dm, I));
  }
  std::vector<int32_t> ids(TopK);
  for (int64_t k = 0; k < TopK; ++k)
    ids[k] = static_cast<int32_t>(k * 2);
  MoeExpertsParams p;
  p.x = static_cast<uint16_t *>(randomDevice(Dm * 2));
  p.ids = uploadDevice(ids);
  p.weights = uploadDevice(std::vector<float>(TopK, 1.0f / TopK));
  p.topK = TopK;
  p.numExperts = tableE;
  p.w1 = uploadDevice(w1);
  p.w3 = uploadDevice(w3);
  p.w2 = uploadDevice(w2);
  p.dim = Dm;
  p.interDim = I;
  p.out = static_cast<uint16_t *>(zerosDevice(Dm * 2));
  const double perExpert = 3.0 * (I * Dm / 2.0 + I * Dm / 32.0);
  double us;
  if (timeKernel("moe_experts", std::vector<MoeExpertsParams>{p}, 4 * 132,
                 us)) // the plan's grid: four blocks per SM
    out.push_back({"moe_experts 16 x MXFP4 3584x3072", us, TopK * perExpert});
  // The same launch on the tensor cores (k3c --moe-mxfp4-mma).
  if (timeKernel("moe_experts_mxfp4", std::vector<MoeExpertsParams>{p}, 4 * 132,
                 us))
    out.push_back(
        {"moe_experts_mxfp4 16 x MXFP4 3584x3072", us, TopK * perExpert});
}

/// A Kimi-Linear-48B MoE layer (K3.md §10's kimi_linear): 256 bf16 experts of
/// 2304 -> 1024 -> 2304, top-8 by a sigmoid router with a bias, one shared
/// expert of 1024, the post-attention norm folded in: moe_ffn (router and
/// experts in one launch, the plan's form), moe_experts on fixed ids, and
/// the router alone. Each expert is its own allocation (3.6 GB in all) filled
/// from one random block, and eight inputs rotate so the chosen experts do.
/// With a -DK3C_KERNEL_TRACE build of the moe family (K3C_PTX_DIR) and
/// `--trace`, prints moe_ffn's timeline of one launch.
void benchMoeKimiLinear(std::vector<Result> &out) {
  constexpr int64_t Dk = 2304, Ik = 1024, Ek = 256, Kk = 8;
  const size_t matBytes = Dk * Ik * 2;
  void *src = randomDevice(matBytes, 0.02f);
  auto copyOf = [&](size_t bytes) {
    void *dst = zerosDevice(bytes);
    if (!gDriver
             ->copyDeviceAsync(reinterpret_cast<cuda::CUdeviceptr>(dst),
                               reinterpret_cast<cuda::CUdeviceptr>(src), bytes,
                               nullptr)
             .isOk())
      std::exit(1);
    return dst;
  };
  auto bf = [&](void *p) {
    WeightRef w;
    w.format = kWeightBf16;
    w.bf16 = static_cast<uint16_t *>(p);
    return w;
  };
  std::vector<WeightRef> w1, w3, w2;
  for (int64_t e = 0; e < Ek; ++e) {
    w1.push_back(bf(copyOf(matBytes)));
    w3.push_back(bf(copyOf(matBytes)));
    w2.push_back(bf(copyOf(matBytes)));
  }
  if (!gDriver->synchronize(nullptr).isOk())
    std::exit(1);
  int32_t *ids = static_cast<int32_t *>(zerosDevice(Kk * 4));
  float *weights = static_cast<float *>(zerosDevice(Kk * 4));
  MoeFfnParams base;
  RouterParams &r = base.router;
  MoeExpertsParams &x = base.experts;
  r.normWeight = static_cast<uint16_t *>(randomDevice(Dk * 2, 0.5f));
  r.gate = static_cast<uint16_t *>(randomDevice(Ek * Dk * 2, 0.02f));
  r.bias = static_cast<float *>(zerosDevice(Ek * 4));
  r.numExperts = Ek;
  r.dim = Dk;
  r.topK = Kk;
  r.scaling = 2.446f;
  r.outIds = ids;
  r.outWeights = weights;
  x.ids = ids;
  x.weights = weights;
  x.topK = Kk;
  x.numExperts = Ek;
  x.w1 = uploadDevice(w1);
  x.w3 = uploadDevice(w3);
  x.w2 = uploadDevice(w2);
  x.dim = Dk;
  x.interDim = Ik;
  x.activation = kActSwiGLU;
  x.normWeight = r.normWeight;
  x.sharedInterDim = Ik;
  x.sharedW1 = bf(copyOf(matBytes));
  x.sharedW3 = bf(copyOf(matBytes));
  x.sharedW2 = bf(copyOf(matBytes));
  x.out = static_cast<uint16_t *>(zerosDevice(Dk * 2));
  x.residual = static_cast<uint16_t *>(randomDevice(Dk * 2));
  std::vector<MoeFfnParams> ffn;
  for (int c = 0; c < 8; ++c) {
    MoeFfnParams p = base;
    p.router.h = p.experts.x = static_cast<uint16_t *>(randomDevice(Dk * 2));
    ffn.push_back(p);
  }
  const double expertBytes = 3.0 * matBytes;
  const double bytes = (Kk + 1) * expertBytes + Ek * Dk * 2.0;
  const int64_t grid = 4 * gDriver->smCount(); // the plan's grid
  double us;
  if (timeKernel("moe_ffn", ffn, grid, us))
    out.push_back({"moe_ffn Kimi-Linear 256 x bf16 2304-1024, top-8 + shared",
                   us, bytes});
  std::vector<MoeExpertsParams> experts;
  for (const MoeFfnParams &p : ffn)
    experts.push_back(p.experts); // the ids of the last moe_ffn run
  if (timeKernel("moe_experts", experts, grid, us))
    out.push_back({"moe_experts Kimi-Linear, fixed ids, + shared", us,
                   bytes - Ek * Dk * 2.0});
  std::vector<RouterParams> routers;
  for (const MoeFfnParams &p : ffn)
    routers.push_back(p.router);
  if (timeKernel("router", routers, (Ek + 7) / 8, us))
    out.push_back(
        {"router Kimi-Linear 256 x 2304, top-8, pre-norm", us, Ek * Dk * 2.0});
  if (gTrace)
    printTrace("moe_ffn", ffn, grid,
               {"router", "gate/up", "down", "combine", "start", "r:staged",
                "r:scored", "r:arrived", "r:ranked"},
               /*itemKinds=*/kTraceStart, [](uint32_t kind) {
                 return kind == kTraceGateUp || kind == kTraceDown;
               });
}

void benchGatedMlp(std::vector<Result> &out, const std::string &label,
                   int64_t in, int64_t inter) {
  const double wBytes = 3.0 * in * inter * 2;
  std::vector<GatedMlpParams> vs;
  void *x = randomDevice(in * 2);
  void *y = zerosDevice(in * 2);
  for (int c = 0; c < copiesFor(wBytes); ++c) {
    GatedMlpParams p;
    p.x = static_cast<uint16_t *>(x);
    p.w1.bf16 = static_cast<uint16_t *>(randomDevice(inter * in * 2, 0.01f));
    p.w3.bf16 = static_cast<uint16_t *>(randomDevice(inter * in * 2, 0.01f));
    p.w2.bf16 = static_cast<uint16_t *>(randomDevice(in * inter * 2, 0.01f));
    p.inDim = in;
    p.interDim = inter;
    p.outDim = in;
    p.out = static_cast<uint16_t *>(y);
    vs.push_back(p);
  }
  double us;
  if (timeKernel("gated_mlp", vs, 4 * 132, us)) // the plan's grid
    out.push_back({label, us, wBytes + in * 4.0});
}

void benchNorms(std::vector<Result> &out) {
  RmsNormParams n;
  n.x = static_cast<uint16_t *>(randomDevice(D * 2));
  n.w = static_cast<uint16_t *>(randomDevice(D * 2));
  n.out = static_cast<uint16_t *>(zerosDevice(D * 2));
  n.n = D;
  double us;
  if (timeKernel("rms_norm", std::vector<RmsNormParams>{n}, 1, us))
    out.push_back({"rms_norm 7168", us, D * 6.0});
  AttnResParams a;
  a.blocks = static_cast<uint16_t *>(randomDevice(8 * D * 2));
  a.numBlocks = 8;
  a.extra = static_cast<uint16_t *>(randomDevice(D * 2));
  a.wNorm = static_cast<uint16_t *>(randomDevice(D * 2));
  a.wProj = static_cast<uint16_t *>(randomDevice(D * 2, 0.01f));
  a.out = static_cast<uint16_t *>(zerosDevice(D * 2));
  a.dim = D;
  a.eps = 1e-5f;
  if (timeKernel("attn_res", std::vector<AttnResParams>{a}, 1, us))
    out.push_back({"attn_res 8 blocks + 1, 7168", us, 12 * D * 2.0});
}

} // namespace

int main(int argc, char **argv) {
  double peak = 0; // measured below unless given
  std::string json, only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--peak-gbps" && i + 1 < argc)
      peak = std::atof(argv[++i]);
    else if (a == "--runs" && i + 1 < argc)
      gRuns = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--trace")
      gTrace = true;
    else {
      std::printf(
          "usage: kernel_bench [--peak-gbps G] [--runs N] [--json FILE] "
          "[--only SUBSTRING] [--trace]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  std::vector<
      std::pair<std::string, std::function<void(std::vector<Result> &)>>>
      cases = {
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 7168 -> 12288", C, D, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 12288 -> 7168", D, C, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 7168 -> 163840 f32 (lm_head)", 163840,
                         D, false, true);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear MXFP4 3584 -> 3072", I, Dm, true, false);
           }},
          // Kimi-Linear-48B's 2304-wide projections (issue target: >= 80% of
          // copy): KDA q/k/v and o_proj, the shared expert, the head.
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 2304 -> 4096 (Kimi-Linear q/k/v)",
                         4096, 2304, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 4096 -> 2304 (Kimi-Linear o_proj)",
                         2304, 4096, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 2304 -> 1024 (Kimi-Linear shared up)",
                         1024, 2304, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o,
                         "linear bf16 1024 -> 2304 (Kimi-Linear shared down)",
                         2304, 1024, false, false);
           }},
          {"linear",
           [](auto &o) {
             benchLinear(o, "linear bf16 2304 -> 163840 f32 (Kimi-Linear head)",
                         163840, 2304, false, true);
           }},
          // The multi-row form at decode-batch and prompt-chunk sizes.
          {"linear_rows",
           [](auto &o) {
             for (int t : {1, 4, 8, 16, 64})
               benchLinearRows(o, "linear_rows 2304 -> 4096", 4096, 2304, t);
             for (int t : {1, 8, 16})
               benchLinearRows(o, "linear_rows 4096 -> 2304", 2304, 4096, t);
             for (int t : {1, 8})
               benchLinearRows(o, "linear_rows 7168 -> 12288", C, D, t);
           }},
          // The tensor-core forms at a decode batch of 16 (the wide tile
          // and the narrow form) and the wide tile at a prompt chunk.
          {"linear_rows_mma",
           [](auto &o) {
             for (bool narrow : {false, true}) {
               benchLinearRowsTensor(
                   o, "linear_rows 2304 -> 12416 (KDA q/k/v/...)", 12416, 2304,
                   16, narrow);
               benchLinearRowsTensor(o, "linear_rows 4096 -> 2304 (o_proj)",
                                     2304, 4096, 16, narrow);
               benchLinearRowsTensor(o, "linear_rows 2304 -> 163840 f32 (head)",
                                     163840, 2304, 16, narrow, true);
             }
             benchLinearRowsTensor(o,
                                   "linear_rows 2304 -> 12416 (KDA q/k/v/...)",
                                   12416, 2304, 64, false);
           }},
          {"kda", benchKda},
          {"mla-32-72", [](auto &o) { benchMla(o, 32, 72); }},
          {"mla-32-1024", [](auto &o) { benchMla(o, 32, 1024); }},
          {"mla-32-4096", [](auto &o) { benchMla(o, 32, 4096); }},
          {"mla-32-32768", [](auto &o) { benchMla(o, 32, 32768); }},
          {"mla-96-1024", [](auto &o) { benchMla(o, 96, 1024); }},
          {"mla-96-32768", [](auto &o) { benchMla(o, 96, 32768); }},
          {"router", benchRouter},
          {"gated_mlp",
           [](auto &o) {
             benchGatedMlp(o, "gated_mlp bf16 7168-33792-7168 (dense)", D,
                           33792);
           }},
          {"gated_mlp",
           [](auto &o) {
             benchGatedMlp(o, "gated_mlp bf16 7168-6144-7168 (shared)", D,
                           6144);
           }},
          {"moe", benchMoe},
          {"moe", benchMoeKimiLinear},
          {"norm", benchNorms},
      };
  // --only picks cases by a substring of their name: one that matches none
  // is a mistake, named before any GPU work (the names are listed).
  auto picked = [&](const std::string &name) {
    return only.empty() || name.find(only) != std::string::npos;
  };
  if (std::none_of(cases.begin(), cases.end(),
                   [&](const auto &c) { return picked(c.first); })) {
    std::fprintf(stderr, "kernel_bench: --only '%s' matches no case; cases:",
                 only.c_str());
    std::string last;
    for (const auto &c : cases)
      if (c.first != last)
        std::fprintf(stderr, " %s", (last = c.first).c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  Expected<cuda::Driver *> d = cuda::Driver::get();
  if (!d) {
    std::printf("kernel_bench: no GPU (%s); nothing to measure\n",
                d.message().c_str());
    return 0;
  }
  gDriver = *d;
  if (peak <= 0) {
    Expected<double> copy = measureDeviceCopyGBps();
    if (!copy) {
      std::fprintf(stderr, "kernel_bench: %s\n", copy.message().c_str());
      return 1;
    }
    peak = *copy;
    std::printf("kernel_bench on %s, copy bandwidth %.0f GB/s (device-to-"
                "device copy of 1 GiB, read + write, measured now), median of "
                "%d runs\n",
                gDriver->deviceName().c_str(), peak, gRuns);
  } else {
    std::printf("kernel_bench on %s, peak %.0f GB/s (given), median of %d "
                "runs\n",
                gDriver->deviceName().c_str(), peak, gRuns);
  }

  std::vector<Result> results;
  for (auto &[name, fn] : cases)
    if (picked(name))
      fn(results);

  std::printf("%-44s %10s %12s %10s %8s\n", "case", "us", "bytes", "GB/s",
              "of copy");
  for (const Result &r : results) {
    const double gbps = r.bytes / (r.us * 1e-6) / 1e9;
    std::printf("%-44s %10.2f %12.0f %10.1f %7.1f%%\n", r.name.c_str(), r.us,
                r.bytes, gbps, 100.0 * gbps / peak);
  }
  if (!json.empty()) {
    FILE *f = std::fopen(json.c_str(), "w");
    if (f) {
      std::fprintf(f, "{\"device\": \"%s\", \"peak_gbps\": %.0f, \"cases\": [",
                   gDriver->deviceName().c_str(), peak);
      for (size_t i = 0; i < results.size(); ++i)
        std::fprintf(f, "%s{\"name\": \"%s\", \"us\": %.3f, \"bytes\": %.0f}",
                     i ? ", " : "", results[i].name.c_str(), results[i].us,
                     results[i].bytes);
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  return 0;
}
