//===- Presets.h - Named model geometries -----------------------*- C++ -*-===//
//
// The model shapes the project builds and tests with: small ones that use
// every feature of K3 (or of Kimi-Linear) at toy size, and the real K3 and
// Kimi-Linear-48B-A3B geometries of K3.md §1, which can be cut down to fewer
// layers and experts so a model of the real width fits a test machine.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODEL_PRESETS_H
#define K3C_RUNTIME_MODEL_PRESETS_H

#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// The config of preset `name` ("tiny", "tiny-linear", "k3",
/// "kimi-linear-48b"). `layers` / `experts` override the preset's layer and
/// routed-expert counts (0 = the preset's own); with fewer layers the MLA
/// layers are recomputed as every 4th and the last, and top-k is capped at
/// the expert count. The result is validated.
Expected<ModelConfig> presetConfig(const std::string &name, int64_t layers = 0,
                                   int64_t experts = 0);

/// Every preset name, the default ("tiny") first.
std::vector<std::string> presetNames();

/// One line describing preset `name` (for --list); empty when unknown.
std::string presetDescription(const std::string &name);

/// The stored dtypes the model maker uses for preset `name` by default: the
/// real geometries (k3, kimi-linear-48b) store as their published
/// checkpoints (K3's conv filters and o_norm F32, Kimi-Linear's router bias
/// BF16); the tiny presets Simple (BF16 conv / o_norm), so that both forms
/// are made and tested.
StoredDtypes presetStoredDtypes(const std::string &name);

} // namespace k3

#endif // K3C_RUNTIME_MODEL_PRESETS_H
