//===- Compare.cpp - Compare a decode against the reference ---------------===//
#include "test/reference/Compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace k3 {
namespace ref {

LogitRows logitRowsFromFlat(const std::vector<float> &flat, int64_t vocab) {
  LogitRows rows;
  if (vocab <= 0)
    return rows;
  for (size_t off = 0; off + vocab <= flat.size(); off += vocab)
    rows.emplace_back(flat.begin() + off, flat.begin() + off + vocab);
  return rows;
}

LogitRows logitRowsFromFloat(const std::vector<std::vector<float>> &rows) {
  LogitRows out;
  for (const auto &r : rows)
    out.emplace_back(r.begin(), r.end());
  return out;
}

double rowRelErr(const std::vector<double> &ref,
                 const std::vector<double> &got) {
  if (ref.size() != got.size())
    return std::numeric_limits<double>::infinity();
  double maxDiff = 0.0, maxRef = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = std::fabs(got[i] - ref[i]);
    if (std::isnan(d))
      return std::numeric_limits<double>::infinity();
    maxDiff = std::max(maxDiff, d);
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  if (maxRef == 0.0)
    return maxDiff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return maxDiff / maxRef;
}

/// Up to `n` tokens of `v` from `from`, for messages.
static std::string tokensAround(const std::vector<int64_t> &v, int64_t from,
                                int64_t n) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = std::max<int64_t>(0, from);
       i < std::min<int64_t>(static_cast<int64_t>(v.size()), from + n); ++i)
    os << (i > from ? " " : "") << v[i];
  os << "]";
  return os.str();
}

double minTop2Gap(const LogitRows &rows) {
  double gap = std::numeric_limits<double>::infinity();
  for (const auto &r : rows) {
    double a = -std::numeric_limits<double>::infinity(), b = a;
    for (double v : r) {
      if (v > a) {
        b = a;
        a = v;
      } else if (v > b) {
        b = v;
      }
    }
    gap = std::min(gap, a - b);
  }
  return gap;
}

DecodeCompareResult compareDecode(const std::vector<int64_t> &refTokens,
                                  const LogitRows &refLogits,
                                  const std::vector<int64_t> &gotTokens,
                                  const LogitRows &gotLogits,
                                  const DecodeCompareOptions &options) {
  DecodeCompareResult r;
  std::ostringstream diag;

  if (refTokens.size() != gotTokens.size()) {
    r.ok = false;
    diag << "token count differs: reference " << refTokens.size()
         << ", candidate " << gotTokens.size() << "\n";
  }
  int64_t n =
      static_cast<int64_t>(std::min(refTokens.size(), gotTokens.size()));
  for (int64_t s = 0; s < n; ++s)
    if (refTokens[s] != gotTokens[s]) {
      r.firstTokenMismatch = s;
      break;
    }
  if (r.firstTokenMismatch >= 0) {
    if (options.requireIdenticalTokens)
      r.ok = false;
    int64_t s = r.firstTokenMismatch;
    diag << "tokens differ first at step " << s << ": reference "
         << tokensAround(refTokens, s, 8) << ", candidate "
         << tokensAround(gotTokens, s, 8) << "\n";
  }

  if (refLogits.size() != gotLogits.size()) {
    r.ok = false;
    diag << "logits row count differs: reference " << refLogits.size()
         << ", candidate " << gotLogits.size() << "\n";
  }
  int64_t rows =
      static_cast<int64_t>(std::min(refLogits.size(), gotLogits.size()));
  if (r.firstTokenMismatch >= 0)
    rows = std::min(rows, r.firstTokenMismatch + 1);
  double sum = 0.0;
  for (int64_t s = 0; s < rows; ++s) {
    for (double v : gotLogits[s])
      if (!std::isfinite(v))
        ++r.nonFinite;
    double e = rowRelErr(refLogits[s], gotLogits[s]);
    sum += e;
    if (e > r.maxRowRelErr || r.worstRow < 0) {
      r.maxRowRelErr = e;
      r.worstRow = s;
    }
  }
  r.rowsCompared = rows;
  r.meanRowRelErr = rows > 0 ? sum / static_cast<double>(rows) : 0.0;
  if (r.nonFinite > 0) {
    r.ok = false;
    diag << r.nonFinite << " non-finite candidate logits\n";
  }
  if (r.maxRowRelErr > options.maxRowRelErr) {
    r.ok = false;
    diag << "logits row " << r.worstRow
         << ": max|diff|/max|ref| = " << r.maxRowRelErr << " > "
         << options.maxRowRelErr << "\n";
  }
  diag << "compared " << rows << " logits rows: max row rel err "
       << r.maxRowRelErr << " (row " << r.worstRow << "), mean "
       << r.meanRowRelErr << "\n";
  r.diagnostic = diag.str();
  return r;
}

} // namespace ref
} // namespace k3
