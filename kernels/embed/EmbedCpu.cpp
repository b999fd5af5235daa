//===- EmbedCpu.cpp - Embedding lookup on the CPU -------------------------===//
//
// Computes out[i] = table[token, i], bit-exact (no arithmetic). Limits: none
// beyond the params; an out-of-range token gives a zero row rather than a read
// outside the table.
//
//===----------------------------------------------------------------------===//
#include "kernels/embed/EmbedCpu.h"

#include <cstring>

namespace k3 {

void embedCpu(const EmbedParams &p) {
  const int64_t token = p.step ? p.step[kStepToken] : p.token;
  if (token < 0 || token >= p.vocab) {
    std::memset(p.out, 0, sizeof(uint16_t) * p.dim);
    return;
  }
  std::memcpy(p.out, p.table + token * p.dim, sizeof(uint16_t) * p.dim);
}

} // namespace k3
