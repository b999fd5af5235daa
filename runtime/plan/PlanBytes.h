//===- PlanBytes.h - What each launch of a plan moves -----------*- C++ -*-===//
//
// A decode step at batch 1 reads every active weight once, so its floor is
// the bytes it moves over the measured copy bandwidth of the same memory
// (DESIGN.md §4). launchBytes() says what each launch moves and
// launchParts() which part of which layer it belongs to (from the plan's
// probes, docs/PLAN.md); `k3c --report`, the profiler and the decode
// benchmark all count with these.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_PLAN_PLANBYTES_H
#define K3C_RUNTIME_PLAN_PLANBYTES_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

/// Bytes one launch reads and writes per token.
struct LaunchBytes {
  uint64_t read = 0, written = 0;
  uint64_t total() const { return read + written; }
};

/// The bytes launch `index` of `plan` moves per token. Every pointer
/// argument counts its whole buffer, weight or state, read for an input
/// field and written for an output field, except: `embed` reads one row of
/// its table; a stacked expert table (a WeightTable field) counts `topK` of
/// its experts (the launch's topK scalar); an MXFP4 matrix of n values is
/// n/2 packed + n/32 scale bytes; a KDA or conv state bound to an output is
/// read and written whole, and a conv-state argument covers one third of its
/// slot (one of q/k/v); the AttnRes block list is written one row by a
/// commit and read `numBlocks` rows by attn_res; an MLA cache is written one
/// row by the append and read `contextRows` rows by any other launch (<= 0:
/// all max_seq rows, the planned worst case `k3c --report` prints). `plan`
/// must be valid (validatePlan); an index out of range gives zero bytes.
///
/// `rows` > 1: the launch over a step of that many sequences (one row each),
/// each weight read once for all of them (a step's floor counts what it must
/// move, not what a kernel happens to re-read): a stacked expert table
/// counts the expected union of the rows' top-k experts under uniform
/// routing, E·(1 − (1 − k/E)^rows) of its E experts (expertsRead); states,
/// buffers, the embedded row and the cache rows count once per row.
LaunchBytes launchBytes(const PlanDoc &plan, size_t index,
                        int64_t contextRows = 0, int64_t rows = 1);
/// The sum over every launch (one decode step of `rows` sequences).
LaunchBytes stepBytes(const PlanDoc &plan, int64_t contextRows = 0,
                      int64_t rows = 1);
/// The experts of an `experts`-expert table that a step of `rows` rows
/// reads when each row picks `topK` of them uniformly at random: the
/// expected size of the union (topK at one row; all of them at most).
double expertsRead(int64_t experts, int64_t topK, int64_t rows);

//===----------------------------------------------------------------------===//
// Layer parts
//===----------------------------------------------------------------------===//

/// The part of the model a launch belongs to: "embed", "attn_res" (the
/// AttnRes kernels of any layer), "kda mixer", "mla mixer", "dense mlp",
/// "moe", "head", or "step" (a launch no probe places, in a plan without
/// probes). `layer` is 0-based, -1 for embed, head and step.
struct LaunchPart {
  std::string part;
  int64_t layer = -1;
};

/// One part per launch. With probes "layers.<l>.mixer" / "layers.<l>.out"
/// (docs/PLAN.md): the launches up to probe layers.l.mixer's `after` that no
/// earlier probe covers are layer l's mixer (KDA or MLA by the config), those
/// up to layers.l.out's are its FFN (dense MLP or MoE), those after the last
/// probe the head; within these, embed and attn_res* kernels are their own
/// parts. Without probes, embed and attn_res* still are, the launch writing
/// the logits and the argmax after it are the head, and the rest is "step".
std::vector<LaunchPart> launchParts(const PlanDoc &plan);

} // namespace k3

#endif // K3C_RUNTIME_PLAN_PLANBYTES_H
