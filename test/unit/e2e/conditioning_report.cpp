//===- conditioning_report.cpp - How well conditioned a made model is -----===//
//
// Not a test: a measuring tool for tuning the model maker's scales. Makes a
// preset with a seed, decodes a prompt greedily with the plan the built k3c
// compiles for it (`--fusion=default`, run through a Session on the CPU
// backend) and with the float64 RefModel, and prints one line per model with where the decodes part
// (if they do), the logits error before that, the smallest router margin and
// top-2 logit gap the reference met, and the activation sizes per layer
// (sublayer outputs relative to the stream they are added to).
//
//   e2e_conditioning_report PRESET SEED [PROMPT_SEED [NEW_TOKENS [-v]]]
//
// PROMPT_SEED 0 is the e2e test's fixed prompt; others draw 8 random ids.
// With -v, the prompt steps are teacher-forced and the plan's probes (each
// layer's stream after its mixer and after its FFN) compared with the
// reference's rows. Built only with the compiler (it runs k3c).
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/exec/Session.h"
#include "runtime/plan/Plan.h"
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Presets.h"
#include "runtime/io/Safetensors.h"
#include "test/reference/Compare.h"
#include "test/reference/RefModel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

using namespace k3;

namespace {

int fail(const std::string &what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3)
    return fail("usage: e2e_conditioning_report PRESET SEED [PROMPT_SEED "
                "[NEW_TOKENS [-v]]]");
  const std::string name = argv[1];
  const uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const uint64_t promptSeed =
      argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 0;
  const int64_t maxNew = argc > 4 ? std::strtoll(argv[4], nullptr, 10) : 64;
  const bool verbose = argc > 5 && std::string(argv[5]) == "-v";

  auto preset = presetConfig(name);
  if (!preset)
    return fail(preset.message());
  std::string pattern =
      (std::filesystem::temp_directory_path() / "k3c-cond-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    return fail("cannot create a temp dir");
  const std::string dir = pattern;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  if (Status s = makeModel(*preset, seed, dir); !s)
    return fail(s.message());
  auto config = parseConfigFile(dir + "/config.json");
  if (!config)
    return fail(config.message());
  auto store = TensorStore::open(dir);
  if (!store)
    return fail(store.message());
  auto weights = bindModelWeights(*config, *store);
  if (!weights)
    return fail(weights.message());

  std::vector<int64_t> prompt = {1, 17, 245, 3, 999, 512, 64, 800};
  if (promptSeed != 0) {
    uint64_t z = promptSeed;
    for (int64_t &t : prompt) {
      z = z * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int64_t>((z >> 33) % config->vocabSize);
    }
  }

  const int64_t maxSeq = static_cast<int64_t>(prompt.size()) + maxNew;
  const std::string planPath = dir + "/model.plan";
  const std::string k3c = std::string(K3C_TEST_K3C) + " " + dir + " -o " +
                          planPath + " --fusion=default --max-seq=" +
                          std::to_string(maxSeq);
  if (std::system(k3c.c_str()) != 0)
    return fail("k3c failed: " + k3c);
  auto plan = readPlanFile(planPath);
  if (!plan)
    return fail(plan.message());
  auto session = Session::open(plan.take(), dir);
  if (!session)
    return fail(session.message());
  auto gen = (*session)->generate(prompt, maxNew, /*keepLogits=*/true);
  if (!gen)
    return fail(gen.message());
  const std::vector<int64_t> *got = &gen->tokens;
  const ref::LogitRows gotRows = ref::logitRowsFromFlat(gen->logits, gen->vocab);
  auto refd = ref::referenceGreedy(*config, *weights, prompt, maxNew);
  if (!refd)
    return fail(refd.message());

  // Error growth over the prompt, step by step (same inputs on both sides).
  std::vector<double> promptErr;
  {
    auto rm = ref::RefModel::create(*config, *weights,
                                    static_cast<int64_t>(prompt.size()));
    if (!rm)
      return fail(rm.message());
    auto forced = (*session)->teacherForce(prompt);
    if (!forced)
      return fail(forced.message());
    // The reference's trace holds h, p, m, x per layer; a probe
    // "layers.<l>.mixer" is p, "layers.<l>.out" is x.
    const PlanDoc &pd = (*session)->plan();
    std::vector<size_t> traceRow;
    for (const PlanProbe &pr : pd.probes) {
      const size_t dot = pr.name.find('.', 7);
      const size_t l = std::strtoull(pr.name.c_str() + 7, nullptr, 10);
      traceRow.push_back(4 * l + (pr.name.substr(dot + 1) == "mixer" ? 1 : 3));
    }
    std::vector<ref::Vec> refTrace;
    (*rm)->setTrace(&refTrace);
    for (size_t i = 0; i < prompt.size(); ++i) {
      refTrace.clear();
      ref::Vec r = (*rm)->step(prompt[i]);
      const ProbedStep &g = (*forced)[i];
      promptErr.push_back(ref::rowRelErr(
          r, std::vector<double>(g.logits.begin(), g.logits.end())));
      if (verbose) {
        // Where the error enters: the stream after each mixer (p) and FFN
        // (x), layer by layer, and how many elements differ at all.
        std::printf("  step %zu probes (rel err, #diff):", i);
        for (size_t k = 0; k < g.probes.size() && k < traceRow.size(); ++k) {
          if (traceRow[k] >= refTrace.size())
            continue;
          const ref::Vec &rv = refTrace[traceRow[k]];
          std::vector<double> gd(g.probes[k].begin(), g.probes[k].end());
          int64_t nd = 0;
          for (size_t j = 0; j < gd.size() && j < rv.size(); ++j)
            nd += gd[j] != rv[j];
          std::printf(" %c%zu %.1e/%lld", traceRow[k] % 4 == 1 ? 'p' : 'x',
                      traceRow[k] / 4, ref::rowRelErr(rv, gd), (long long)nd);
        }
        std::printf("\n");
      }
    }
  }

  ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = 1.0;
  auto cmp =
      ref::compareDecode(refd->tokens, refd->logits, *got, gotRows, opt);

  // The reference's near-ties over the compared part of the decode.
  const int64_t lastPos =
      static_cast<int64_t>(prompt.size()) - 1 +
      (cmp.firstTokenMismatch >= 0 ? cmp.firstTokenMismatch : maxNew - 1);
  double minMargin = 1e300;
  int64_t marginsBelow1e3 = 0, marginsBelow1e2 = 0, margins = 0;
  for (int64_t q = 0; q <= lastPos && q < (int64_t)refd->routingMargins.size();
       ++q)
    for (double m : refd->routingMargins[q]) {
      minMargin = std::min(minMargin, m);
      marginsBelow1e3 += m < 1e-3;
      marginsBelow1e2 += m < 1e-2;
      ++margins;
    }
  double minGap = 1e300, sumGap = 0, sumStd = 0;
  for (const auto &row : refd->logits) {
    double a = -1e300, b = -1e300, s = 0, s2 = 0;
    for (double v : row) {
      s += v;
      s2 += v * v;
      if (v > a) {
        b = a;
        a = v;
      } else if (v > b) {
        b = v;
      }
    }
    double n = static_cast<double>(row.size());
    minGap = std::min(minGap, a - b);
    sumGap += a - b;
    sumStd += std::sqrt(std::max(0.0, s2 / n - (s / n) * (s / n)));
  }
  std::set<int64_t> distinct(refd->tokens.begin(), refd->tokens.end());
  std::set<std::vector<int64_t>> sets;
  for (const auto &step : refd->expertChoices)
    for (auto layer : step) {
      std::sort(layer.begin(), layer.end());
      sets.insert(layer);
    }
  double maxOutAlpha = 0;
  for (const auto &a : refd->outputAlphas)
    for (double v : a)
      maxOutAlpha = std::max(maxOutAlpha, v);
  double firstRowErr =
      cmp.rowsCompared > 0
          ? ref::rowRelErr(refd->logits[0], gotRows[0])
          : -1;

  std::printf("%-12s seed %-6llu prompt %-4llu first_mismatch %3lld  "
              "rel_err max %.2e mean %.2e row0 %.2e  min_margin %.1e "
              "(<1e-3: %lld, <1e-2: %lld of %lld)  gap min %.3f mean %.2f  "
              "logit_std %.2f  distinct %zu  route_sets %zu  out_alpha %.3f\n",
              name.c_str(), (unsigned long long)seed,
              (unsigned long long)promptSeed, (long long)cmp.firstTokenMismatch,
              cmp.maxRowRelErr, cmp.meanRowRelErr, firstRowErr, minMargin,
              (long long)marginsBelow1e3, (long long)marginsBelow1e2,
              (long long)margins, minGap, sumGap / refd->logits.size(),
              sumStd / refd->logits.size(), distinct.size(), sets.size(),
              maxOutAlpha);
  std::printf("  prompt-step rel err:");
  for (double e : promptErr)
    std::printf(" %.1e", e);
  std::printf("\n");
  if (verbose) {
    // Smallest router margin of each MoE layer over the decode.
    std::vector<double> layerMin;
    for (const auto &pos : refd->routingMargins) {
      layerMin.resize(pos.size(), 1e300);
      for (size_t i = 0; i < pos.size(); ++i)
        layerMin[i] = std::min(layerMin[i], pos[i]);
    }
    std::printf("  min router margin per MoE layer:");
    for (double m : layerMin)
      std::printf(" %.1e", m);
    std::printf("\n");
    // Per layer, mean over steps.
    const auto &st = refd->layerStats;
    for (int64_t l = 0; l < config->numLayers; ++l) {
      ref::LayerStats m;
      for (const auto &step : st) {
        const ref::LayerStats &s = step[l];
        m.stream += s.stream;
        m.mixer += s.mixer;
        m.ffnStream += s.ffnStream;
        m.ffn += s.ffn;
        m.routed += s.routed;
        m.shared += s.shared;
        m.maxAlpha = std::max(m.maxAlpha, s.maxAlpha);
      }
      double n = static_cast<double>(st.size());
      std::printf("  layer %lld: stream %.3f mixer %.3f | ffn_stream %.3f ffn "
                  "%.3f (routed %.3f shared %.3f)  max_alpha %.3f\n",
                  (long long)l, m.stream / n, m.mixer / n, m.ffnStream / n,
                  m.ffn / n, m.routed / n, m.shared / n, m.maxAlpha);
    }
    std::printf("  tokens:");
    for (int64_t t : refd->tokens)
      std::printf(" %lld", (long long)t);
    std::printf("\n");
  }
  return 0;
}
