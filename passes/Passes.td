//===- Passes.td - k3 to k3 transformations ----------------*- tablegen -*-===//
//
// The passes between import and lowering. Each has a lit test named after
// its flag in test/Passes/. Fusion passes only rewrite what they can prove
// equal: fused ops round at exactly the points of the op chains they replace
// (docs/NUMERICS.md), so every fusion strategy decodes the same tokens.
//
//===----------------------------------------------------------------------===//
#ifndef K3_PASSES_TD
#define K3_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3DecomposeLayers : Pass<"k3-decompose-layers", "::mlir::func::FuncOp"> {
  let summary = "Decompose coarse k3 ops into fine-grained ops";
  let description = [{
    Rewrites `k3.kda`, `k3.mla`, `k3.dense_mlp`, `k3.moe`, `k3.latent_moe`
    and `k3.lm_head` into projections (`k3.linear`), short conv steps,
    l2norm, KDA gate, β, the recurrent step, gated norm, cache append,
    absorbed attend, router, expert mix, SiTU/SwiGLU and adds.

    Before:
    ```mlir
    %y = k3.dense_mlp %h, %w1, %w3, %w2 {act = #k3<activation silu>} : ...
    ```
    After:
    ```mlir
    %g = k3.linear %h, %w1 : ...
    %u = k3.linear %h, %w3 : ...
    %a = k3.swiglu %g, %u : tensor<512xbf16>
    %y = k3.linear %a, %w2 : ...
    ```
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3FuseNorms : Pass<"k3-fuse-norms", "::mlir::func::FuncOp"> {
  let summary = "Fold RMSNorm into the projections that consume it";
  let description = [{
    An `k3.rms_norm` whose users are all `k3.linear` (as their input) is
    erased, and each projection takes `norm(%w)` with the norm's eps: the
    kernel normalises its input on the fly.

    Before:
    ```mlir
    %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : ...
    %q = k3.linear %n, %wq : ...
    ```
    After:
    ```mlir
    %q = k3.linear %x, %wq norm(%w) {eps = 1.0e-05 : f64} : ...
    ```
  }];
}

def K3FuseKda : Pass<"k3-fuse-kda", "::mlir::func::FuncOp"> {
  let summary = "Fuse the KDA token step into one k3.kda_decode";
  let description = [{
    Matches conv_step ×3 → l2norm ×2 → kda_gate, sigmoid → kda_step →
    gated_rms_norm and replaces the chain by `k3.kda_decode`, one kernel.
    With `low-rank-gates` it also folds a plain `k3.linear` (bf16, no norm,
    no residual, used only there) that makes the op's `f` or `gt` into it
    (`f_b(...)` / `g_b(...)`): the k = r second projections of Kimi's
    low-rank gates then run inside the KDA kernel instead of as launches.
  }];
  let options = [
    Option<"lowRankGates", "low-rank-gates", "bool", /*default=*/"true",
           "Fold the f_b / g_b projections into k3.kda_decode">
  ];
}

def K3FuseMla : Pass<"k3-fuse-mla", "::mlir::func::FuncOp"> {
  let summary = "Fuse the MLA latent projection, cache append, attend and gate";
  let description = [{
    Matches `linear(kv_a)` → `mla_cache_append` → `mla_attend` →
    `mul_sigmoid` and replaces it by `k3.mla_decode`.
  }];
}

def K3FuseMoe : Pass<"k3-fuse-moe", "::mlir::func::FuncOp"> {
  let summary = "Fuse router, top-k, expert GEMVs, weighted mix and latent norm";
  let description = [{
    Matches `k3.router` → `k3.expert_mix` (→ latent `k3.rms_norm`) and
    replaces it by `k3.routed_experts`.
  }];
}

def K3FuseMoeFfn : Pass<"k3-fuse-moe-ffn", "::mlir::func::FuncOp"> {
  let summary = "Fuse a MoE layer's FFN (norm, routed and shared experts, residual) into one op";
  let description = [{
    Runs after k3-fuse-moe and k3-fuse-residual. Matches, for a layer
    without latent projections,

    ```mlir
    %n = k3.rms_norm %h, %w {eps = 1.0e-05 : f64} : ...
    %r = k3.routed_experts %n, %n router(%gate, %bias) experts(%w1, %w3, %w2) {...} : ...
    %g = k3.linear %n, %s1 : ...
    %u = k3.linear %n, %s3 : ...
    %a = k3.swiglu %g, %u : ...
    %t = k3.linear %a, %s2 residual(%r) : ...
    %o = k3.add %h, %t : ...
    ```

    (or `%o = k3.add %h, %r` without shared experts) and replaces it by

    ```mlir
    %o = k3.moe_ffn %h norm(%w) router(%gate, %bias) experts(%w1, %w3, %w2) shared(%s1, %s3, %s2) {...}
    ```

    which lowers to two launches (router, moe_experts) instead of seven,
    with every rounding point kept.
  }];
}

def K3FuseResidual : Pass<"k3-fuse-residual", "::mlir::func::FuncOp"> {
  let summary = "Move residual adds into the epilogue of the producing projection";
  let description = [{
    `k3.add(%r, k3.linear(...))` where the projection has no other user
    becomes `k3.linear ... residual(%r)`.
  }];
}

def K3FuseAttnRes : Pass<"k3-fuse-attn-res", "::mlir::func::FuncOp"> {
  let summary = "Fuse AttnRes into the RMSNorm that follows it";
  let description = [{
    `k3.rms_norm(k3.attn_res(...))` where the AttnRes result has no other
    user becomes `k3.attn_res ... then_norm(%w)`.
  }];
}

def K3FuseMlp : Pass<"k3-fuse-mlp", "::mlir::func::FuncOp"> {
  let summary = "Fuse a gated MLP (w1, w3, activation, w2) into one k3.gated_mlp";
  let description = [{
    Matches `linear(w1)`, `linear(w3)` on the same input → `situ`/`swiglu`
    → `linear(w2)` and replaces it by `k3.gated_mlp` (with the input norm
    and residual epilogue when the projections had them).
  }];
}

def K3FuseProjections : Pass<"k3-fuse-projections", "::mlir::func::FuncOp"> {
  let summary = "Group projections of the same input into one k3.linear_group";
  let description = [{
    Horizontal fusion: `k3.linear` ops of one block that read the same `x`
    with the same folded norm (weight and eps) or none, have no residual
    epilogue and a bf16 result become one `k3.linear_group` (one
    `linear_multi` launch over all their rows; the input norm is computed
    once). Each result is bit-identical to the projection it replaces.
    Groups hold 2 to 8 projections (kLinearMultiMax); a larger set is split
    in block order into groups of 8 (a single remainder stays a
    `k3.linear`). The group is placed before the first user of any of its
    results; a projection whose weight does not dominate that point stays
    out. Users of other kinds (e.g. `k3.probe`) never block a group.

    Runs after the other fusions, which match single `k3.linear`s (the
    KDA, MLA and gated MLP chains), so it only groups what they left:
    typically KDA's q, k, v, f_a, b, g (or g_a) projections of the layer
    input, MLA's q (or q_a) with its output gate, and a dense MLP's gate and
    up projections where `k3-fuse-mlp` did not run.

    Before:
    ```mlir
    %q = k3.linear %x, %wq norm(%n) {eps = 1.0e-05 : f64} : (...) -> tensor<256xbf16>
    %k = k3.linear %x, %wk norm(%n) {eps = 1.0e-05 : f64} : (...) -> tensor<256xbf16>
    %b = k3.linear %x, %wb norm(%n) {eps = 1.0e-05 : f64} : (...) -> tensor<4xbf16>
    %o = k3.linear %y, %wo residual(%x) : (...) -> tensor<256xbf16>
    ```
    After:
    ```mlir
    %q, %k, %b = k3.linear_group %x, %wq, %wk, %wb norm(%n) {eps = 1.0e-05 : f64}
                   : (...) -> (tensor<256xbf16>, tensor<256xbf16>, tensor<4xbf16>)
    %o = k3.linear %y, %wo residual(%x) : (...) -> tensor<256xbf16>
    ```
  }];
}

def K3PartitionRanks : Pass<"k3-partition-ranks", "::mlir::ModuleOp"> {
  let summary = "Split the decode step over tensor-parallel ranks";
  let description = [{
    Makes rank `rank`'s part of a decode step split over `ranks` ranks, on
    the coarse IR (before `k3-decompose-layers`). Each weight that is split
    gets the part's type and `split = #k3.split<axis, rank, ranks>`, so the
    runtime reads only that part of the checkpoint:

    - `k3.kda`: heads split (column-parallel q/k/v, their conv filters, f_b,
      dt_bias, A_log, b and the output gate g / g_b; a rank's conv and
      recurrent state hold its heads), row-parallel `o_proj`;
    - `k3.mla`: heads split (q or q_b, kv_b, the output gate column-parallel,
      `o_proj` row-parallel); the latent projection, its norm and the latent
      cache are the same on every rank;
    - `k3.dense_mlp`, and each routed and shared expert of `k3.moe`: the
      intermediate dimension split (w1 / w3 column-, w2 row-parallel); the
      router is the same on every rank, so every rank picks the same experts;
    - `k3.lm_head`: the vocabulary split, the logits gathered.

    After each split mixer and FFN a `k3.all_reduce` sums the ranks' partial
    outputs (bf16 partials, summed in fp32 in rank order), after the lm_head
    a `k3.all_gather` joins the logits. The embedding, the norms, AttnRes
    and K3's `k3.latent_moe` (not split yet) are computed whole on every
    rank. Sets the module attributes `k3.ranks` and `k3.rank`. Fails, naming
    the op, when a split dimension does not divide over the ranks (an MXFP4
    input split must also keep whole 32-value blocks).

    Before (`ranks=2 rank=1`):
    ```mlir
    %o = k3.weight "model.layers.0.self_attn.o_proj.weight" : tensor<256x256xbf16>
    %y = k3.kda %h, %cs, %s weights(..., %o) {config = #k3.kda<heads = 4, ...>} : ...
    ```
    After:
    ```mlir
    %o = k3.weight "model.layers.0.self_attn.o_proj.weight"
           {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<256x128xbf16>
    %p = k3.kda %h, %cs, %s weights(..., %o) {config = #k3.kda<heads = 2, ...>} : ...
    %y = k3.all_reduce %p {ranks = 2 : i64} : tensor<256xbf16> -> tensor<256xbf16>
    ```
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", /*default=*/"1",
           "the number of tensor-parallel ranks (1: nothing to do)">,
    Option<"rank", "rank", "int64_t", /*default=*/"0",
           "the rank whose part this module computes, in [0, ranks)">,
  ];
  let dependentDialects = ["::mlir::k3::K3Dialect"];
}

def K3InjectMutant : Pass<"k3-inject-mutant", "::mlir::func::FuncOp"> {
  let summary = "Make a deliberately wrong decode step (a test mutant)";
  let description = [{
    Breaks the graph on purpose, so that tests can show the end-to-end check
    against the float64 reference notices a wrong model. Never part of a
    real pipeline. Kinds:

    - `attn-res-skip` (coarse IR): every `k3.attn_res` is replaced by its
      `p` operand, i.e. the mix only ever sees the partial block.
    - `skip-layer` (coarse IR): layer `layer` contributes nothing; the
      residual adds fed by its mixer (`k3.kda` / `k3.mla`) and its FFN
      (`k3.dense_mlp` / `k3.moe` / `k3.latent_moe`) become their residual
      operand. Layers are found by the `layers.N.` part of the ops' NameLoc.
      Fails when the layer is out of range, or when one of its sublayers
      feeds no residual add (an AttnRes commit layer, where `p = a`).
    - `tp-no-all-reduce` (after `k3-partition-ranks`, the graph mutant
      C7): the `k3.all_reduce` after each split mixer (`k3.kda` / `k3.mla`)
      is dropped, so its rank-local partial o_proj output flows on as if it
      were the whole.
    - `router-expert0` (decomposed or fused IR, after `k3-decompose-layers`
      and any fusion): every `k3.router` and `k3.routed_experts` gets
      `k3.mutant.force_expert = 0 : i64`, which `convert-k3-to-launch` lowers
      to the router's `forceExpert` scalar: every slot routes to expert 0.
      The fusion passes do not carry the attribute, so run it after them.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"\"",
           "attn-res-skip | router-expert0 | skip-layer | tp-no-all-reduce">,
    Option<"layer", "layer", "int64_t", /*default=*/"1",
           "the layer that skip-layer removes">,
  ];
}

#endif // K3_PASSES_TD
