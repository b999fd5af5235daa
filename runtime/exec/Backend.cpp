//===- Backend.cpp - What every backend checks of a step's rows -----------===//
//
// The row rules of Backend::stepSlots, stated once: every backend refuses
// the same steps with the same messages, before anything runs.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Backend.h"

#include "runtime/exec/PlanBinding.h"

#include <map>

namespace k3 {

void appendPromptRows(std::vector<SlotStep> &rows,
                      const std::vector<int64_t> &prompt, int64_t from,
                      int64_t to, int64_t slot, int64_t base) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t t = from; t < to; ++t)
    rows.push_back(
        {slot, prompt[static_cast<size_t>(t)], base + t, t + 1 == n});
}

Status Backend::checkSlot(int64_t slot) const {
  if (slot < 0 || slot >= maxBatch())
    return makeError("slot ", slot, " is outside the plan's ", maxBatch(),
                     " slots (max_batch)");
  return Status::ok();
}

Status Backend::checkRows(const std::vector<SlotStep> &rows) const {
  if (rows.empty())
    return makeError("a step needs at least one row");
  if (static_cast<int64_t>(rows.size()) > kMaxStepRows)
    return makeError("a step of ", rows.size(), " rows is more than the ",
                     kMaxStepRows, " one step may have");
  std::map<int64_t, int64_t> lastPos; // slot -> its previous row's position
  for (size_t r = 0; r < rows.size(); ++r) {
    const SlotStep &row = rows[r];
    K3_RETURN_IF_ERROR(checkSlot(row.slot));
    K3_RETURN_IF_ERROR(checkStepInputs(row.token, row.pos, vocab(), maxSeq())
                           .withContext("slot " + std::to_string(row.slot)));
    auto [it, first] = lastPos.try_emplace(row.slot, row.pos);
    if (!first) {
      if (row.pos != it->second + 1)
        return makeError("slot ", row.slot, ": row ", r, " is at position ",
                         row.pos, ", not ", it->second + 1,
                         " after the slot's previous row (a slot's rows are "
                         "consecutive positions in order)");
      it->second = row.pos;
    }
  }
  return Status::ok();
}

Status Backend::checkStateAccess(int64_t slot, size_t state,
                                 const std::vector<uint64_t> &stateBytes,
                                 const size_t *written) const {
  K3_RETURN_IF_ERROR(checkSlot(slot));
  if (state >= stateBytes.size())
    return makeError("state ", state, " is out of range");
  if (written && *written != stateBytes[state])
    return makeError("state ", state, " holds ", stateBytes[state],
                     " bytes, the snapshot has ", *written);
  return Status::ok();
}

Expected<std::vector<double>>
Backend::timeStepSlots(const std::vector<SlotStep> &rows) {
  if (!timesStepSlots())
    return makeError(name(), " cannot time the launches of a step of rows");
  std::vector<double> us;
  launchTimes_ = &us;
  Status st = stepSlots(rows);
  launchTimes_ = nullptr;
  if (!st)
    return st;
  return us;
}

Status Backend::stepSlots(const std::vector<SlotStep> &rows) {
  K3_RETURN_IF_ERROR(checkRows(rows));
  lastRows_ = 0;
  for (const SlotStep &row : rows)
    K3_RETURN_IF_ERROR(step(row.token, row.pos));
  lastRows_ = rows.size();
  return Status::ok();
}

} // namespace k3
