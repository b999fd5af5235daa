//===- Importer.h - config.json to a k3 module ------------------*- C++ -*-===//
//
// The first step of k3c: a model variant's config becomes one decode-step
// function in the k3 dialect. Weights are `k3.weight` values named by their
// Hugging Face checkpoint names (K3.md §10), caches are `k3.state` slots, and
// each model part is one coarse op, in the order of the K3.md §4 recurrence.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_IMPORT_IMPORTER_H
#define K3C_IMPORT_IMPORTER_H

#include "runtime/model/Config.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir::k3 {


/// Builds the decode-step module of `config` for contexts of up to `maxSeq`
/// tokens. The config must be valid (ModelConfig::validate).
OwningOpRef<ModuleOp> importModel(MLIRContext &ctx,
                                  const ::k3::ModelConfig &config,
                                  int64_t maxSeq);

} // namespace mlir::k3

#endif // K3C_IMPORT_IMPORTER_H
