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
    With `mla-clusters` (the default), a `k3.mla_attend` / `k3.mla_decode`
    of Kimi-Linear's and K3's head shape (L = 512, P = V = 128, R a
    multiple of 8) whose heads fit 4 blocks each on the GPU's SMs launches
    `mla_attend_clustered`: a cluster of 4 blocks per head that splits the
    head's q̂, rows and W_UV over them (kernels/mla/Mla.cu). It attends at
    most 4096 rows: when the cache holds more, an `mla_attend` launch
    follows it, both with `handover = 4096`, and each returns at once on
    the other's contexts.
    With `attn-res-clusters` (the default since its GPU tests passed:
    docs/PERF.md, thirtieth session), a `k3.attn_res` of at most 9
    sources and a hidden size of whole 8-element chunks up to 8192 launches
    `attn_res_clustered`: one cluster of up to 8 blocks (as many as its
    threads need for a chunk each; one block, unclustered, for a small D),
    block r a slice of D, the per-source sums added over the cluster
    through distributed shared memory (kernels/attnres/AttnRes.cu).
    With `moe-mxfp4-mma` (the default since its GPU tests passed:
    docs/PERF.md, thirtieth session), a routed-expert mix without a norm or
    a shared expert whose tables are MXFP4 of sizes that fit (dim and
    interDim multiples of 512 up to 4096: K3's latent experts) launches
    `moe_experts_mxfp4`: the experts' rows stream through a shared-memory
    ring by cp.async into fp16 tensor-core products (kernels/moe/Moe.cu).
  }];
  let dependentDialects = ["::mlir::k3l::K3LDialect"];
  let options = [
    Option<"kdaClusters", "kda-clusters", "bool", /*default=*/"true",
           "Launch kda_decode of 128-wide heads as a cluster of 4 blocks "
           "per head (false: one block per head slice, finished through "
           "global memory)">,
    Option<"mlaClusters", "mla-clusters", "bool", /*default=*/"true",
           "Attend with mla_attend_clustered (a cluster of 4 blocks per "
           "head) where the heads have the K3 / Kimi-Linear shape and fit "
           "the SMs, handing contexts above 4096 rows to an mla_attend "
           "launch after it (false: mla_attend alone)">,
    Option<"attnResClusters", "attn-res-clusters", "bool",
           /*default=*/"true",
           "Mix AttnRes sources with attn_res_clustered (one cluster of up "
           "to 8 blocks, a slice of D each) where at most 9 sources and "
           "D <= 8192 fit it (false: attn_res, one block)">,
    Option<"moeMxfp4Mma", "moe-mxfp4-mma", "bool", /*default=*/"true",
           "Run routed MXFP4 experts of sizes that fit with "
           "moe_experts_mxfp4 (their rows on the tensor cores through a "
           "shared-memory ring; false: moe_experts on the CUDA cores)">,
  ];
}

def K3PrefetchWeights : Pass<"k3-prefetch-weights", "::mlir::ModuleOp"> {
  let summary = "Let latency-bound launches fetch a later launch's weight "
                "into L2";
  let description = [{
    kda_decode, mla_attend and the routing of moe_ffn are chains of
    dependent rounds that move little memory: while they run the HBM
    idles. Each launch of a kernel named in `kernels` (they have an
    `l2Prefetch` field, kernels/common/WeightRef.h) gets the first large
    weight (>= `min-bytes`, bf16 or f32) of the next launch that reads one,
    at most `max-bytes` of it, as `l2Prefetch` / `l2PrefetchBytes`: its
    blocks ask L2 for those bytes before their griddepcontrol.wait, and the
    later launch (an o_proj GEMV, the next layer's projections) then reads
    them from L2. The weight's `k3l.weight` moves before the launch.

    Before:
    ```mlir
    k3l.launch "kda_decode" (%uq, ...) {arg_names = ["uq", ...], ...}
    %w = k3l.weight "model.layers.0.self_attn.o_proj.weight" {format = "bf16", shape = array<i64: 256, 256>} : !k3l.ptr
    k3l.launch "linear" (%x, %w, %y) {arg_names = ["x", "w", "out"], ...}
    ```
    After:
    ```mlir
    %w = k3l.weight "model.layers.0.self_attn.o_proj.weight" {...} : !k3l.ptr
    k3l.launch "kda_decode" (%uq, ..., %w) {arg_names = ["uq", ..., "l2Prefetch"],
        scalars = {..., l2PrefetchBytes = 131072 : i64}, ...}
    k3l.launch "linear" (%x, %w, %y) {...}
    ```
  }];
  let options = [
    ListOption<"kernels", "kernels", "std::string",
               "Kernels whose launches prefetch (each must have an "
               "l2Prefetch field); empty: kda_decode and mla_attend">,
    Option<"maxBytes", "max-bytes", "int64_t", /*default=*/"33554432",
           "Most bytes one launch prefetches (L2 is 50 MB on an H200)">,
    Option<"minBytes", "min-bytes", "int64_t", /*default=*/"1048576",
           "Smallest weight worth a prefetch">,
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
