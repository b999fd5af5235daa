//===- k3-mkmodel.cpp - Write a synthetic K3 / Kimi-Linear checkpoint -----===//
//
// A thin main over presetConfig and makeModel: picks a preset geometry,
// optionally cuts it down, and writes config.json + safetensors with
// deterministic weights, generated on --threads threads (the bytes do not
// depend on how many); the small tensors real checkpoints store either way
// in the preset's dtypes, or as --real-dtypes / --simple-dtypes say. Exit
// codes: 0 success, 1 the model could not be written, 2 bad command line.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/Presets.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

void printHelp(std::FILE *out) {
  std::fprintf(
      out,
      "usage: k3-mkmodel PRESET -o DIR [options]\n"
      "       k3-mkmodel --list\n"
      "\n"
      "Writes a model directory with deterministic pseudo-random weights in\n"
      "the Hugging Face layout (config.json + safetensors) that k3c and the\n"
      "reference modeling code both load.\n"
      "\n"
      "options:\n"
      "  -o, --output DIR   directory to write (created if needed; an old\n"
      "                     model.safetensors / shards / index there are "
      "replaced)\n"
      "  --seed N           weight seed (default 0); the same seed gives\n"
      "                     byte-identical files\n"
      "  --layers N         number of layers (default: the preset's); MLA\n"
      "                     layers become every 4th and the last\n"
      "  --experts N        routed experts per MoE layer (default: the "
      "preset's);\n"
      "                     top-k is capped at N\n"
      "  --real-dtypes      store the tensors real checkpoints store either "
      "way\n"
      "                     as the published checkpoint does (K3: conv "
      "filters\n"
      "                     and o_norm F32; Kimi-Linear: router bias BF16);\n"
      "                     the default for k3 and kimi-linear-48b\n"
      "  --simple-dtypes    conv filters and o_norm BF16, router bias F32 "
      "(the\n"
      "                     default for the tiny presets)\n"
      "  --config-only      write only config.json (to compile plans for a\n"
      "                     geometry without making its weights)\n"
      "  --shard-mb N       split the weights into shards of at most N MiB\n"
      "                     with model.safetensors.index.json (default: one "
      "file)\n"
      "  --threads N        threads that generate the weights, 1 to %d "
      "(default:\n"
      "                     K3C_CPU_THREADS if set, else the hardware "
      "threads: %d\n"
      "                     here); any N gives byte-identical files. Memory "
      "stays\n"
      "                     at about N+2 pieces of at most 8 MiB each\n"
      "  --list             list the presets and exit\n"
      "  -h, --help         show this help\n"
      "\n"
      "exit status: 0 written, 1 error while writing, 2 bad command line\n",
      k3::kMaxMakerThreads, k3::defaultMakerThreads());
}

void printPresets() {
  for (const std::string &name : k3::presetNames())
    std::printf("  %-16s %s\n", name.c_str(),
                k3::presetDescription(name).c_str());
}

/// Parses a non-negative integer option value; false on junk or overflow.
bool parseCount(const char *text, uint64_t &out) {
  if (!text || !*text || *text == '-')
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

int usageError(const std::string &message) {
  std::fprintf(stderr, "k3-mkmodel: error: %s\n", message.c_str());
  std::fprintf(stderr, "run 'k3-mkmodel --help' for usage\n");
  return kExitUsage;
}

} // namespace

int main(int argc, char **argv) {
  std::string preset, outDir;
  uint64_t seed = 0, layers = 0, experts = 0, shardMb = 0, threads = 0;
  bool configOnly = false;
  int realDtypes = -1; // -1: the preset's default

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    // The option's value: the next argument, or null at the end.
    auto value = [&]() -> const char * {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    auto count = [&](uint64_t &dst) -> int {
      const char *v = value();
      if (!v)
        return usageError(arg + " needs a value");
      if (!parseCount(v, dst))
        return usageError(arg + ": '" + v + "' is not a non-negative integer");
      return 0;
    };
    if (arg == "-h" || arg == "--help") {
      printHelp(stdout);
      return 0;
    } else if (arg == "--list") {
      std::printf("presets:\n");
      printPresets();
      return 0;
    } else if (arg == "-o" || arg == "--output") {
      const char *v = value();
      if (!v)
        return usageError(arg + " needs a directory");
      outDir = v;
    } else if (arg == "--seed") {
      if (int rc = count(seed))
        return rc;
    } else if (arg == "--layers") {
      if (int rc = count(layers))
        return rc;
      if (layers == 0)
        return usageError("--layers must be at least 1");
    } else if (arg == "--experts") {
      if (int rc = count(experts))
        return rc;
      if (experts == 0)
        return usageError("--experts must be at least 1");
    } else if (arg == "--config-only") {
      configOnly = true;
    } else if (arg == "--real-dtypes" || arg == "--simple-dtypes") {
      realDtypes = arg == "--real-dtypes" ? 1 : 0;
    } else if (arg == "--shard-mb") {
      if (int rc = count(shardMb))
        return rc;
      if (shardMb == 0)
        return usageError("--shard-mb must be at least 1");
    } else if (arg == "--threads") {
      if (int rc = count(threads))
        return rc;
      if (threads == 0)
        return usageError("--threads must be at least 1");
      if (threads > static_cast<uint64_t>(k3::kMaxMakerThreads))
        return usageError("--threads must be at most " +
                          std::to_string(k3::kMaxMakerThreads));
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("unknown option '" + arg + "'");
    } else if (preset.empty()) {
      preset = arg;
    } else {
      return usageError("unexpected argument '" + arg +
                        "' (only one PRESET is allowed)");
    }
  }
  if (preset.empty())
    return usageError("no PRESET given (one of: tiny, tiny-linear, k3, "
                      "kimi-linear-48b; see --list)");
  if (outDir.empty())
    return usageError("no output directory given (-o DIR)");
  if (layers > (1u << 20) || experts > (1u << 20) || shardMb > (1ull << 30))
    return usageError("--layers, --experts or --shard-mb is unreasonably "
                      "large");

  k3::Expected<k3::ModelConfig> config = k3::presetConfig(
      preset, static_cast<int64_t>(layers), static_cast<int64_t>(experts));
  if (!config) {
    // An unknown preset is a command-line mistake; list the valid ones.
    std::fprintf(stderr, "k3-mkmodel: error: %s\n", config.message().c_str());
    std::fprintf(stderr, "presets:\n");
    for (const std::string &name : k3::presetNames())
      std::fprintf(stderr, "  %s\n", name.c_str());
    return kExitUsage;
  }

  if (configOnly) {
    std::error_code ec;
    std::filesystem::create_directories(outDir, ec);
    std::ofstream out(std::filesystem::path(outDir) / "config.json");
    out << k3::writeConfigJson(*config);
    out.close();
    if (ec || !out) {
      std::fprintf(stderr, "k3-mkmodel: error: cannot write %s/config.json\n",
                   outDir.c_str());
      return kExitFailure;
    }
    std::printf("k3-mkmodel: wrote %s/config.json (preset %s, %lld layers, "
                "%lld experts; no weights)\n",
                outDir.c_str(), preset.c_str(),
                static_cast<long long>(config->numLayers),
                static_cast<long long>(config->numExperts));
    return 0;
  }

  // One line per ~5% so a multi-GB model shows it is alive.
  int lastStep = -1;
  auto progress = [&](uint64_t done, uint64_t total) {
    int step = total ? static_cast<int>(done * 20 / total) : 20;
    if (step != lastStep) {
      lastStep = step;
      std::printf("k3-mkmodel: %3d%%  %.1f / %.1f MiB\n", step * 5,
                  done / 1048576.0, total / 1048576.0);
      std::fflush(stdout);
    }
  };
  const int numThreads =
      threads ? static_cast<int>(threads) : k3::defaultMakerThreads();
  const k3::StoredDtypes dtypes = realDtypes < 0
                                      ? k3::presetStoredDtypes(preset)
                                  : realDtypes ? k3::StoredDtypes::Published
                                               : k3::StoredDtypes::Simple;
  uint64_t bytes = 0;
  auto start = std::chrono::steady_clock::now();
  k3::Status st = k3::makeModel(
      *config, seed, outDir,
      [&](uint64_t done, uint64_t total) {
        bytes = done;
        progress(done, total);
      },
      static_cast<int64_t>(shardMb) * 1024 * 1024, k3::Structure::Planted,
      numThreads, dtypes);
  if (!st) {
    std::fprintf(stderr, "k3-mkmodel: error: %s\n", st.message().c_str());
    return kExitFailure;
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("k3-mkmodel: wrote %s (preset %s, %lld layers, %lld experts, "
              "seed %llu, %s dtypes)\n",
              outDir.c_str(), preset.c_str(),
              static_cast<long long>(config->numLayers),
              static_cast<long long>(config->numExperts),
              static_cast<unsigned long long>(seed),
              dtypes == k3::StoredDtypes::Published ? "published" : "simple");
  std::printf("k3-mkmodel: %.1f MiB in %.2f s (%.0f MiB/s, %d threads)\n",
              bytes / 1048576.0, seconds,
              seconds > 0 ? bytes / 1048576.0 / seconds : 0.0, numThreads);
  return 0;
}
