//===- FuzzUtil.h - Shared pieces of the libFuzzer targets ------*- C++ -*-===//
//
// The fuzzers (fuzz/<name>_fuzz.cpp) end a run with __builtin_trap() when an
// invariant breaks, so libFuzzer reports it as a crash with the input saved;
// ASan and UBSan report memory and arithmetic errors the same way.
//
// mutateJson is a structure-aware mutation for the JSON inputs: byte flips
// rarely turn `"numHeads": 4` into `"numHeads": 288230376151711744` while
// keeping the document valid, and sizes that multiply past 64 bits, zero
// divisors and out-of-range indices are exactly what the readers must
// refuse. So half of the mutations parse the document, replace one value
// (a number by an "interesting" integer, a string by one the formats use,
// an argument by a step input or another target) or drop or repeat an
// element, and write it back; the other half are libFuzzer's own.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_FUZZ_FUZZUTIL_H
#define K3C_FUZZ_FUZZUTIL_H

#include "runtime/io/JsonCheck.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

/// Stops the run as a crash when `cond` is false, printing `what`.
#define K3_FUZZ_CHECK(cond, what)                                              \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "fuzz invariant failed: %s\n", what);               \
      __builtin_trap();                                                        \
    }                                                                          \
  } while (0)

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size,
                                   size_t maxSize);

namespace k3::fuzz {

using ojson = nlohmann::ordered_json;

/// Integers that find overflow, sign, zero and off-by-one errors.
inline int64_t interestingInt(std::mt19937_64 &rng, int64_t old) {
  static const int64_t fixed[] = {0,
                                  1,
                                  -1,
                                  2,
                                  3,
                                  7,
                                  31,
                                  32,
                                  33,
                                  64,
                                  255,
                                  256,
                                  1023,
                                  1024,
                                  65535,
                                  65536,
                                  int64_t(1) << 20,
                                  int64_t(1) << 24,
                                  (int64_t(1) << 31) - 1,
                                  int64_t(1) << 31,
                                  int64_t(1) << 32,
                                  int64_t(1) << 40,
                                  (int64_t(1) << 40) + 1,
                                  int64_t(1) << 58,
                                  int64_t(1) << 62,
                                  std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()};
  const uint64_t u = static_cast<uint64_t>(old); // wraps, never UB
  switch (rng() % 4) {
  case 0:
    return static_cast<int64_t>(u + rng() % 3 - 1);
  case 1:
    return int64_t(1) << (rng() % 63);
  case 2:
    return static_cast<int64_t>(u * 2);
  default:
    return fixed[rng() % (sizeof(fixed) / sizeof(fixed[0]))];
  }
}

/// Strings the formats give meaning to.
inline std::string interestingString(std::mt19937_64 &rng,
                                     const std::string &old) {
  static const char *words[] = {
      "bf16",      "f32",        "i32",       "i64",          "u8",
      "mxfp4",     "kda_state",  "conv_state", "mla_cache",   "attn_res_blocks",
      "token",     "pos",        "length",    "linear",       "moe_experts",
      "router",    "mla_attend", "kda_step",  "kda_l2norm",   "embed",
      "BF16",      "F32",        "U8",        "I64",          "BOOL",
      "kimi_k3",   "kimi_linear", "situ",     "silu",         "__metadata__"};
  switch (rng() % 3) {
  case 0:
    return words[rng() % (sizeof(words) / sizeof(words[0]))];
  case 1:
    return old + "{e}";
  default:
    return old.empty() ? old : old.substr(0, rng() % old.size());
  }
}

/// Every value of `j` (containers included), without recursion.
inline std::vector<ojson *> allValues(ojson &j) {
  std::vector<ojson *> out, stack = {&j};
  while (!stack.empty()) {
    ojson *v = stack.back();
    stack.pop_back();
    out.push_back(v);
    if (v->is_structured())
      for (auto &child : *v)
        stack.push_back(&child);
  }
  return out;
}

/// One structural mutation of `j`; false when it found nothing to change.
/// With `focus`, three times in four the value is taken from the member of
/// that name (a plan's "launches": where the sizes the kernels use live).
inline bool mutateValue(ojson &j, std::mt19937_64 &rng,
                        const char *focus = nullptr) {
  ojson *root = &j;
  if (focus && j.is_object() && j.contains(focus) && rng() % 4 != 0)
    root = &j[focus];
  std::vector<ojson *> values = allValues(*root);
  if (values.empty())
    return false;
  ojson &v = *values[rng() % values.size()];
  switch (rng() % 8) {
  case 0:
  case 1:
  case 2: // numbers matter most: sizes, indices, offsets
    if (v.is_number_integer()) {
      v = interestingInt(rng, v.get<int64_t>());
      return true;
    }
    if (v.is_number()) {
      const double picks[] = {0.0, -1.0, 1e-45, 1e38, 1e300, -0.0, 0.5};
      v = picks[rng() % (sizeof(picks) / sizeof(picks[0]))];
      return true;
    }
    break;
  case 3:
    if (v.is_string()) {
      v = interestingString(rng, v.get<std::string>());
      return true;
    }
    break;
  case 4: // an argument becomes a step input or another target
    if (v.is_number_integer() || v.is_object()) {
      const char *inputs[] = {"token", "pos", "length"};
      switch (rng() % 3) {
      case 0:
        v = ojson{{"input", inputs[rng() % 3]}};
        break;
      case 1:
        v = ojson{{"buffer", static_cast<int64_t>(rng() % 8)}};
        break;
      default:
        v = ojson{{"state", static_cast<int64_t>(rng() % 3)},
                  {"offset", interestingInt(rng, 0)}};
        break;
      }
      return true;
    }
    break;
  case 5: // drop a member or an element
    if (v.is_object() && !v.empty()) {
      auto it = v.begin();
      std::advance(it, static_cast<long>(rng() % v.size()));
      v.erase(it.key());
      return true;
    }
    if (v.is_array() && !v.empty()) {
      v.erase(v.begin() + static_cast<long>(rng() % v.size()));
      return true;
    }
    break;
  case 6: // repeat an element (a launch, a buffer, a dimension)
    if (v.is_array() && !v.empty() && v.size() < 256) {
      const size_t i = rng() % v.size();
      ojson copy = v[i];
      v.insert(v.begin() + static_cast<long>(rng() % (v.size() + 1)), copy);
      return true;
    }
    break;
  default: // swap two elements (launch order)
    if (v.is_array() && v.size() >= 2) {
      std::swap(v[rng() % v.size()], v[rng() % v.size()]);
      return true;
    }
    break;
  }
  return false;
}

/// Mutates the JSON text in [data, data + size) in place (up to maxSize
/// bytes); returns the new size, or 0 when the text is not JSON this can
/// mutate (the caller then falls back on LLVMFuzzerMutate).
inline size_t mutateJsonText(uint8_t *data, size_t size, size_t maxSize,
                             std::mt19937_64 &rng,
                             const char *focus = nullptr) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  if (!k3::checkJsonText(text).isOk())
    return 0;
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const std::exception &) {
    return 0;
  }
  bool changed = false;
  for (int tries = 0; tries < 8 && !changed; ++tries)
    changed = mutateValue(j, rng, focus);
  if (!changed)
    return 0;
  const std::string out = j.dump();
  if (out.size() > maxSize)
    return 0;
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

/// The custom mutator of a fuzzer whose whole input is JSON.
inline size_t mutateJson(uint8_t *data, size_t size, size_t maxSize,
                         unsigned seed, const char *focus = nullptr) {
  std::mt19937_64 rng(seed);
  if (rng() % 2 == 0) {
    const size_t n = mutateJsonText(data, size, maxSize, rng, focus);
    if (n)
      return n;
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}

} // namespace k3::fuzz

#endif // K3C_FUZZ_FUZZUTIL_H
