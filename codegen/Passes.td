//===- Passes.td - Lowerings out of k3 ---------------------*- tablegen -*-===//
#ifndef K3_CODEGEN_PASSES_TD
#define K3_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertK3ToLaunch : Pass<"convert-k3-to-launch", "::mlir::ModuleOp"> {
  let summary = "Lower fused k3 ops to k3l kernel launches";
  let description = [{
    Each k3 op becomes the launches of the kernels that compute it (a fused
    op may need more than one), with its tensors turned into scratch
    allocations, its weights into `k3l.weight` and its state into
    `k3l.state`. The decode-step function keeps its (token, pos) signature;
    the runtime binds them as launch inputs.

    Before:
    ```mlir
    %y = k3.linear %x, %w : (tensor<256xbf16>, tensor<512x256xbf16>) -> tensor<512xbf16>
    ```
    After:
    ```mlir
    %y = k3l.alloc {bytes = 1024 : i64, dtype = "bf16", elems = 512 : i64, name = "linear"} : !k3l.ptr
    k3l.launch "linear" (%x, %w, %y) {arg_names = ["x", "w", "out"], ...}
    ```
    With `kda-clusters` (the default), a `k3.kda_decode` of 128-wide heads
    and a conv of at most 4 taps launches each head on a cluster of 4
    blocks (`cluster = array<i64: 4, 1, 1>`): the blocks of a head trade
    its q, k, decay and norm sums through distributed shared memory
    instead of global memory and a counter (kernels/kda/Kda.cu).
  }];
  let dependentDialects = ["::mlir::k3l::K3LDialect"];
  let options = [
    Option<"kdaClusters", "kda-clusters", "bool", /*default=*/"true",
           "Launch kda_decode of 128-wide heads as a cluster of 4 blocks "
           "per head (false: one block per head slice, finished through "
           "global memory)">,
  ];
}

def K3PlanBuffers : Pass<"k3-plan-buffers", "::mlir::ModuleOp"> {
  let summary = "Place scratch buffers in one arena, reusing dead space";
  let description = [{
    Computes each `k3l.alloc`'s live range over the launch sequence and
    gives it an `offset` (first fit, largest first, `alignment`-byte
    aligned) so that buffers whose ranges overlap never share bytes. Sets
    `k3l.arena_bytes` on the module.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"256",
           "Byte alignment of every buffer">,
    Option<"reuse", "reuse", "bool", /*default=*/"true",
           "Reuse the space of dead buffers (false: one slot per buffer)">,
  ];
}

#endif // K3_CODEGEN_PASSES_TD
