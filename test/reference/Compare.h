//===- Compare.h - Compare a decode against the reference -------*- C++ -*-===//
//
// The end-to-end checks, kept apart from any one decoder so the same logic
// judges the CPU decoder now and the compiled plan executor (CPU or CUDA)
// later: greedy tokens must be identical, and each logits row must be within
// a relative tolerance of the reference row. Returns a readable diagnostic
// rather than asserting, so a test prints where and by how much it failed.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_REFERENCE_COMPARE_H
#define K3C_TEST_REFERENCE_COMPARE_H

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {
namespace ref {

/// Logits as rows [step][vocab].
using LogitRows = std::vector<std::vector<double>>;

/// Rows from a flat fp32 buffer [steps, vocab].
LogitRows logitRowsFromFlat(const std::vector<float> &flat, int64_t vocab);
/// Rows from fp32 rows.
LogitRows logitRowsFromFloat(const std::vector<std::vector<float>> &rows);

struct DecodeCompareOptions {
  /// Bound on max_i |got[i] − ref[i]| / max_i |ref[i]|, per row.
  double maxRowRelErr = 2e-2;
  /// Tokens must match exactly (greedy decode of the same model).
  bool requireIdenticalTokens = true;
};

struct DecodeCompareResult {
  bool ok = true;
  /// Step of the first differing token, or −1.
  int64_t firstTokenMismatch = -1;
  /// Largest per-row relative error over the rows compared.
  double maxRowRelErr = 0.0;
  /// Row where maxRowRelErr occurred.
  int64_t worstRow = -1;
  /// Mean of the per-row relative errors.
  double meanRowRelErr = 0.0;
  /// Rows compared (up to and including the first token mismatch: after it
  /// the two decodes see different inputs and their logits mean nothing).
  int64_t rowsCompared = 0;
  /// Non-finite values in the candidate logits.
  int64_t nonFinite = 0;
  /// What went wrong (and the measured errors), one line per finding.
  std::string diagnostic;
};

/// Compares a candidate greedy decode against the reference one.
DecodeCompareResult compareDecode(const std::vector<int64_t> &refTokens,
                                  const LogitRows &refLogits,
                                  const std::vector<int64_t> &gotTokens,
                                  const LogitRows &gotLogits,
                                  const DecodeCompareOptions &options = {});

/// The smallest top-1 minus top-2 gap over `rows` (how close the decode came
/// to a greedy near-tie; +inf when there are no rows).
double minTop2Gap(const LogitRows &rows);

/// max_i |got[i] − ref[i]| / max_i |ref[i]| (∞ on NaN or size mismatch).
double rowRelErr(const std::vector<double> &ref,
                 const std::vector<double> &got);

} // namespace ref
} // namespace k3

#endif // K3C_TEST_REFERENCE_COMPARE_H
