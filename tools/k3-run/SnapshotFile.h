//===- SnapshotFile.h - Prefix snapshots as files ---------------*- C++ -*-===//
//
// `k3-run --snapshot-out FILE` saves the state after a shared prompt prefix
// (Session::snapshotPrefix) and `--snapshot-in FILE` restores it, so later
// runs skip the prefix's steps. The file (docs/RUN.md "Snapshot files") is
// versioned, names the plan it was made with (planIdentity: a hash of the
// plan's bytes) and carries two CRC-32s (header, payload); reading refuses
// another plan's snapshot, a truncated file and a corrupted one, each with a
// message that says which. Writes are atomic (runtime/io/AtomicFile.h).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TOOLS_K3RUN_SNAPSHOTFILE_H
#define K3C_TOOLS_K3RUN_SNAPSHOTFILE_H

#include "runtime/plan/Plan.h"
#include "runtime/exec/Session.h"
#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// The snapshot file version this k3-run reads and writes.
constexpr uint32_t kSnapshotVersion = 1;
/// Bytes before the payload: the fields and the header's CRC-32.
constexpr uint64_t kSnapshotHeaderBytes = 52;

/// A plan's identity in snapshot files: FNV-1a 64 of the plan's bytes (the
/// plan file, or the plan embedded in an executable: the same bytes).
uint64_t planIdentity(const std::string &planBytes);

/// The file bytes of `snap` for `plan` (identity `planId`).
Expected<std::string> serializeSnapshot(const PrefixSnapshot &snap,
                                        const PlanDoc &plan, uint64_t planId);

/// Parses file bytes; `origin` prefixes every error. Errors: not a snapshot
/// (magic), another version, a corrupted header or payload (CRC), another
/// plan (identity), a truncated file or trailing bytes, a layout that is not
/// `plan`'s, prefix tokens outside the vocabulary or beyond max_seq.
Expected<PrefixSnapshot> parseSnapshot(const std::string &bytes,
                                       const PlanDoc &plan, uint64_t planId,
                                       const std::string &origin);

/// Writes `snap` to `path` atomically (a temporary in the same folder,
/// renamed over it); `inputs` are files the output must not replace.
Status writeSnapshotFile(const std::string &path, const PrefixSnapshot &snap,
                         const PlanDoc &plan, uint64_t planId,
                         const std::vector<std::string> &inputs = {});

/// Reads `path`: its header first (so another plan's snapshot is named as
/// such, whatever its size), then the whole file bounded by the size that
/// header describes.
Expected<PrefixSnapshot> readSnapshotFile(const std::string &path,
                                          const PlanDoc &plan, uint64_t planId);

} // namespace k3

#endif // K3C_TOOLS_K3RUN_SNAPSHOTFILE_H
