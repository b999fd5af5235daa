//===- Executable.h - Plans embedded in the runtime binary ------*- C++ -*-===//
//
// `k3c --emit=exe` makes a self-contained model binary: the k3-run binary,
// then the plan file bytes, then a 16-byte trailer (the plan length as a
// little-endian uint64 and the ASCII bytes "K3CEXE01"; docs/PLAN.md). At
// start the runtime looks for the trailer at the end of its own file.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_PLAN_EXECUTABLE_H
#define K3C_RUNTIME_PLAN_EXECUTABLE_H

#include "runtime/Status.h"

#include <optional>
#include <string>

namespace k3 {

/// The trailer magic.
constexpr char kExeTrailerMagic[] = "K3CEXE01";
/// Bytes of the trailer (length + magic).
constexpr size_t kExeTrailerSize = 16;

/// The plan embedded in the file at `exePath` (default: this process's own
/// binary), std::nullopt when the file has no trailer, or an error when the
/// trailer is there but inconsistent (length past the start of the file).
Expected<std::optional<std::string>>
findEmbeddedPlan(const std::string &exePath = "/proc/self/exe");

/// Writes `outPath` = the runtime binary at `runtimeBinaryPath` (without any
/// plan it already carries) + `planBytes` + trailer, and makes it executable
/// (mode 0755). Written to a temporary name first, then renamed, so a
/// failure never leaves a half-written executable at outPath.
Status writeExecutable(const std::string &runtimeBinaryPath,
                       const std::string &planBytes,
                       const std::string &outPath);

} // namespace k3

#endif // K3C_RUNTIME_PLAN_EXECUTABLE_H
