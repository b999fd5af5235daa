//===- K3Ops.td - k3 operations ----------------------------*- tablegen -*-===//
//
// Three layers of ops:
//  - leaves: `k3.weight` (a named checkpoint tensor) and `k3.state` (a
//    per-sequence cache slot);
//  - coarse ops, one per model part, as the importer emits them;
//  - fine ops, what `k3-decompose-layers` turns the coarse ops into, and
//    the fused ops the fusion passes build back out of them.
// Per-token vectors are rank-1 tensors; matrices are [out, in] like the
// checkpoint. Shapes are static everywhere; verifiers check every relation.
//
//===----------------------------------------------------------------------===//
#ifndef K3_OPS_TD
#define K3_OPS_TD

include "dialect/K3Dialect.td"
include "dialect/K3Types.td"
include "dialect/K3Attrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def K3_Vector : RankedTensorOf<[BF16, F32]>;
def K3_BF16Tensor : RankedTensorOf<[BF16]>;
def K3_F32Tensor : RankedTensorOf<[F32]>;
/// A weight operand: bf16/f32 tensor, MXFP4 (packed + scales), or a small
/// weight stored bf16 or f32 (chosen at bind time).
def K3_WeightType : AnyTypeOf<[RankedTensorOf<[BF16, F32, UI8]>, K3_Mxfp4Type,
                               K3_VectorWeightType]>;
/// A small weight read element by element (conv filters, o_norm): bf16 or
/// f32 fixed in the IR, or !k3.vector_weight (as the checkpoint stores it).
def K3_SmallWeight : AnyTypeOf<[RankedTensorOf<[BF16, F32]>,
                                K3_VectorWeightType]>;
/// A matrix weight: bf16 or MXFP4.
def K3_MatrixType : AnyTypeOf<[RankedTensorOf<[BF16]>, K3_Mxfp4Type]>;

/// Ops that read and update a per-sequence cache.
def K3_StateEffects : MemoryEffects<[MemRead, MemWrite]>;

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

def K3_WeightOp : K3_Op<"weight", [Pure]> {
  let summary = "a named checkpoint tensor";
  let description = [{
    A tensor of the checkpoint, by its Hugging Face name. The result type
    gives shape and format: a bf16 or f32 tensor, `!k3.mxfp4<...>` for
    `name.weight_packed` + `name.weight_scale` (the name then omits the
    `.weight` suffix), or `!k3.vector_weight<...>` for a small weight bound
    in whichever of bf16 / f32 the checkpoint stores. A name containing `{e}`
    stacks the experts along the leading dimension.

    ```mlir
    %w = k3.weight "model.layers.0.self_attn.q_proj.weight" : tensor<256x256xbf16>
    %e = k3.weight "model.layers.1.block_sparse_moe.experts.{e}.w1" : !k3.mxfp4<16x128x128>
    %c = k3.weight "model.layers.0.self_attn.q_conv1d.weight" : !k3.vector_weight<256x1x4>
    ```
    With `split` (a tensor-parallel plan), the type is one rank's part of the
    checkpoint tensor, whose full shape is the type's with `axis` times
    `ranks` (`#k3.split`).
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<K3_SplitAttr>:$split);
  let results = (outs K3_WeightType:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def K3_StateOp : K3_Op<"state", [Pure]> {
  let summary = "a per-sequence cache slot";
  let description = [{
    A handle to resident per-sequence state, named by its slot. Ops that take
    the handle read and update the state in place; the runtime allocates one
    slot per name for the planned maximum context.

    ```mlir
    %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 4, key_dim = 64, value_dim = 64>
    ```
  }];
  let arguments = (ins StrAttr:$slot);
  let results = (outs K3_StateType:$state);
  let assemblyFormat = "$slot attr-dict `:` type($state)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Coarse ops (one per model part)
//===----------------------------------------------------------------------===//

def K3_EmbedOp : K3_Op<"embed", [Pure]> {
  let summary = "embedding lookup";
  let description = [{
    `result = table[token]`; the runtime rejects token >= vocab.
    ```mlir
    %x = k3.embed %tok, %table : tensor<1024x256xbf16> -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins I32:$token, K3_BF16Tensor:$table);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$token `,` $table attr-dict `:` type($table) `->` type($result)";
  let hasVerifier = 1;
}

def K3_RmsNormOp : K3_Op<"rms_norm", [Pure]> {
  let summary = "RMSNorm (fp32 variance, cast, then times the weight)";
  let description = [{
    ```mlir
    %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<256xbf16>, tensor<256xbf16> -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_BF16Tensor:$weight, F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$x `,` $weight attr-dict `:` type($x) `,` type($weight) `->` type($result)";
  let hasVerifier = 1;
}

def K3_KdaOp : K3_Op<"kda", [AttrSizedOperandSegments, K3_StateEffects]> {
  let summary = "a whole KDA (Kimi Delta Attention) mixer for one token";
  let description = [{
    Projections, short conv + SiLU, l2norm, decay gate, β, the delta-rule
    recurrence, gated RMSNorm and the output projection (K3.md §2). Input is
    the normalised hidden state. The output gate is either full rank
    (`gate(%g_proj)`) or low rank (`low_rank_gate(%g_a, %g_b)`).
    ```mlir
    %y = k3.kda %h, %conv, %s weights(%q, %k, %v, %qc, %kc, %vc, %fa, %fb, %dt, %alog, %b, %on, %o)
           gate(%g) {config = #k3.kda<heads = 4, head_dim = 64, conv = 4, full_rank_gate = true,
           lower_bound = -5.0>, eps = 1.0e-05 : f64} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_ConvStateType:$conv_state,
      K3_KdaStateType:$state,
      K3_MatrixType:$q_proj, K3_MatrixType:$k_proj, K3_MatrixType:$v_proj,
      K3_SmallWeight:$q_conv, K3_SmallWeight:$k_conv, K3_SmallWeight:$v_conv,
      K3_MatrixType:$f_a_proj, K3_MatrixType:$f_b_proj,
      K3_F32Tensor:$dt_bias, K3_F32Tensor:$a_log, K3_MatrixType:$b_proj,
      K3_SmallWeight:$o_norm, K3_MatrixType:$o_proj,
      Optional<K3_MatrixType>:$g_proj, Optional<K3_MatrixType>:$g_a_proj,
      Optional<K3_MatrixType>:$g_b_proj,
      K3_KdaConfigAttr:$config, F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $conv_state `,` $state `weights` `(` $q_proj `,` $k_proj `,` $v_proj `,`
    $q_conv `,` $k_conv `,` $v_conv `,` $f_a_proj `,` $f_b_proj `,` $dt_bias `,`
    $a_log `,` $b_proj `,` $o_norm `,` $o_proj `)`
    (`gate` `(` $g_proj^ `)`)? (`low_rank_gate` `(` $g_a_proj^ `,` $g_b_proj `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MlaOp : K3_Op<"mla", [AttrSizedOperandSegments, K3_StateEffects]> {
  let summary = "a whole gated NoPE MLA mixer for one token";
  let description = [{
    Query (q_lora path or direct q_proj), latent KV projection + norm +
    cache append at `pos`, attention over positions 0..pos, optional sigmoid
    output gate and the output projection (K3.md §3). No RoPE.
    ```mlir
    %y = k3.mla %h, %pos, %cache q_lora(%qa, %qan, %qb) weights(%kva, %kvan, %kvb, %o)
           gate(%g) {config = #k3.mla<...>} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, Index:$pos, K3_MlaCacheType:$cache,
      Optional<K3_MatrixType>:$q_a_proj, Optional<K3_BF16Tensor>:$q_a_norm,
      Optional<K3_MatrixType>:$q_b_proj, Optional<K3_MatrixType>:$q_proj,
      K3_MatrixType:$kv_a_proj, K3_BF16Tensor:$kv_a_norm,
      K3_MatrixType:$kv_b_proj, K3_MatrixType:$o_proj,
      Optional<K3_MatrixType>:$g_proj, K3_MlaConfigAttr:$config);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $pos `,` $cache
    (`q_lora` `(` $q_a_proj^ `,` $q_a_norm `,` $q_b_proj `)`)? (`q` `(` $q_proj^ `)`)?
    `weights` `(` $kv_a_proj `,` $kv_a_norm `,` $kv_b_proj `,` $o_proj `)`
    (`gate` `(` $g_proj^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

/// Activation attributes shared by every gated MLP op.
defvar K3_ActArgs = (ins K3_ActivationAttr:$act,
                         OptionalAttr<F64Attr>:$situ_beta,
                         OptionalAttr<F64Attr>:$situ_linear_beta);

def K3_DenseMlpOp : K3_Op<"dense_mlp", [Pure]> {
  let summary = "a dense gated MLP: w2 · act(w1 x, w3 x)";
  let description = [{
    ```mlir
    %y = k3.dense_mlp %h, %w1, %w3, %w2 {act = #k3<activation situ>, situ_beta = 4.0 : f64,
           situ_linear_beta = 25.0 : f64} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, K3_MatrixType:$w1,
                            K3_MatrixType:$w3, K3_MatrixType:$w2),
                       K3_ActArgs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $w1 `,` $w3 `,` $w2 attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoeOp : K3_Op<"moe", [AttrSizedOperandSegments, Pure]> {
  let summary = "a MoE layer with experts on the full hidden size (Kimi-Linear)";
  let description = [{
    Sigmoid router with score-correction bias (ranking only), top-k, the
    routed gated-MLP experts (stacked weights [E, ...]) and optional shared
    experts.
    ```mlir
    %y = k3.moe %h router(%gate, %bias) experts(%w1, %w3, %w2) shared(%s1, %s3, %s2)
           {config = #k3.moe<...>, act = #k3<activation silu>} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, K3_MatrixType:$gate,
                            K3_F32Tensor:$bias, K3_MatrixType:$w1,
                            K3_MatrixType:$w3, K3_MatrixType:$w2,
                            Optional<K3_MatrixType>:$shared_w1,
                            Optional<K3_MatrixType>:$shared_w3,
                            Optional<K3_MatrixType>:$shared_w2,
                            K3_MoeConfigAttr:$config),
                       K3_ActArgs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `router` `(` $gate `,` $bias `)` `experts` `(` $w1 `,` $w3 `,` $w2 `)`
    (`shared` `(` $shared_w1^ `,` $shared_w3 `,` $shared_w2 `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LatentMoeOp : K3_Op<"latent_moe", [AttrSizedOperandSegments, Pure]> {
  let summary = "K3's latent MoE: experts act on a down-projected latent";
  let description = [{
    `z = down x`; routed experts on z; `r = Σ w_k bf16(y_k)`; optional latent
    RMSNorm; `up r` plus the shared experts on the full x (K3.md §5).
    ```mlir
    %y = k3.latent_moe %h router(%gate, %bias) latent(%down, %up) norm(%n)
           experts(%w1, %w3, %w2) shared(%s1, %s3, %s2) {...} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, K3_MatrixType:$gate,
                            K3_F32Tensor:$bias, K3_MatrixType:$down,
                            K3_MatrixType:$up, Optional<K3_BF16Tensor>:$norm,
                            K3_MatrixType:$w1, K3_MatrixType:$w3,
                            K3_MatrixType:$w2,
                            Optional<K3_MatrixType>:$shared_w1,
                            Optional<K3_MatrixType>:$shared_w3,
                            Optional<K3_MatrixType>:$shared_w2,
                            K3_MoeConfigAttr:$config, F64Attr:$eps),
                       K3_ActArgs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `router` `(` $gate `,` $bias `)` `latent` `(` $down `,` $up `)`
    (`norm` `(` $norm^ `)`)? `experts` `(` $w1 `,` $w3 `,` $w2 `)`
    (`shared` `(` $shared_w1^ `,` $shared_w3 `,` $shared_w2 `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_AttnResOp : K3_Op<"attn_res", [MemoryEffects<[MemRead]>]> {
  let summary = "block attention residual over committed blocks and p";
  let description = [{
    Softmax mix (fp32) of the first `count` committed blocks in `%blocks`
    and the extra source `%p`, keyed by their RMS-normalised values (K3.md
    §4). With `then_norm(%w)` (what `k3-fuse-attn-res` makes) the result is
    RMSNorm-ed with weight `%w` and the same eps before it is written.
    ```mlir
    %h = k3.attn_res %blocks, %p, %norm, %proj {count = 2 : i64, eps = 1.0e-05 : f64} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_AttnResBlocksType:$blocks, K3_BF16Tensor:$p,
                       K3_BF16Tensor:$norm, K3_BF16Tensor:$proj,
                       Optional<K3_BF16Tensor>:$out_norm, I64Attr:$count,
                       F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $blocks `,` $p `,` $norm `,` $proj (`then_norm` `(` $out_norm^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_AttnResCommitOp : K3_Op<"attn_res_commit", [K3_StateEffects]> {
  let summary = "append a block representation to the AttnRes block list";
  let description = [{
    `B.append(p)` (K3.md §4); the block list is cleared at the start of each
    token. `index` is the block's position in the list.
    ```mlir
    k3.attn_res_commit %blocks, %p {index = 0 : i64} : !k3.attn_res_blocks<...>, tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_AttnResBlocksType:$blocks, K3_BF16Tensor:$p,
                       I64Attr:$index);
  let assemblyFormat = "$blocks `,` $p attr-dict `:` type($blocks) `,` type($p)";
  let hasVerifier = 1;
}

def K3_ProbeOp : K3_Op<"probe", [MemoryEffects<[MemWrite]>]> {
  let summary = "names a value a checker may read after it is computed";
  let description = [{
    Marks `value` as the named point `name` of the decode step (e.g.
    `layers.3.mixer`: the stream after layer 3's mixer, `layers.3.out`:
    after its FFN). It computes nothing: the lowering turns it into a plan
    probe (docs/PLAN.md) that a teacher-forced check reads launch by launch
    and compares with the float64 reference's trace. Passes treat it as an
    ordinary user of `value`; a fusion that replaces the value's producer
    carries the probe to the new producer through the use.
    ```mlir
    k3.probe %x {name = "layers.0.out"} : tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_Vector:$value, StrAttr:$name);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def K3_LmHeadOp : K3_Op<"lm_head", [Pure]> {
  let summary = "vocabulary projection to fp32 logits";
  let description = [{
    ```mlir
    %logits = k3.lm_head %n, %w : tensor<256xbf16>, tensor<1024x256xbf16> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_BF16Tensor:$weight);
  let results = (outs K3_F32Tensor:$logits);
  let assemblyFormat = "$x `,` $weight attr-dict `:` type($x) `,` type($weight) `->` type($logits)";
  let hasVerifier = 1;
}

def K3_ArgmaxOp : K3_Op<"argmax", [Pure]> {
  let summary = "greedy choice: index of the largest logit (ties: lowest)";
  let description = [{
    ```mlir
    %next = k3.argmax %logits : tensor<1024xf32>
    ```
  }];
  let arguments = (ins K3_F32Tensor:$logits);
  let results = (outs I32:$token);
  let assemblyFormat = "$logits attr-dict `:` type($logits)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives (tensor-parallel plans, placed by k3-partition-ranks)
//===----------------------------------------------------------------------===//

def K3_AllReduceOp : K3_Op<"all_reduce"> {
  let summary = "the sum of every rank's partial value, rounded once";
  let description = [{
    Each of `ranks` ranks holds a partial sum (the output of a row-parallel
    projection: its part of o_proj's or w2's inputs); every rank gets
    `R(sum over ranks r = 0 .. ranks-1 of partial_r)`, summed in fp32 in rank
    order, so all ranks hold the same bits. A communication, not a pure
    computation: no pass may duplicate, move or drop it on one rank alone.
    ```mlir
    %y = k3.all_reduce %partial {ranks = 2 : i64} : tensor<256xbf16> -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$partial, I64Attr:$ranks);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$partial attr-dict `:` type($partial) `->` type($result)";
  let hasVerifier = 1;
}

def K3_AllGatherOp : K3_Op<"all_gather"> {
  let summary = "every rank's part of a vector, concatenated in rank order";
  let description = [{
    The logits of a vocabulary-parallel lm_head: rank r computed rows
    `[r·n, (r+1)·n)`; every rank gets all `ranks · n`.
    ```mlir
    %l = k3.all_gather %part {ranks = 2 : i64} : tensor<512xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins K3_F32Tensor:$part, I64Attr:$ranks);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = "$part attr-dict `:` type($part) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fine ops
//===----------------------------------------------------------------------===//

def K3_LinearOp : K3_Op<"linear", [AttrSizedOperandSegments, Pure]> {
  let summary = "projection y = W x, bf16 or MXFP4 weight, optional fusions";
  let description = [{
    fp32 accumulation; a bf16 result is rounded, an f32 result is not (router
    logits, lm_head). Fusions visible as operands: `norm(%w)` folds an RMSNorm
    of `x` into the projection; `residual(%r)` adds `%r` in the epilogue.
    ```mlir
    %y = k3.linear %x, %w norm(%nw) residual(%r) {eps = 1.0e-05 : f64}
           : (tensor<256xbf16>, tensor<512x256xbf16>, tensor<256xbf16>, tensor<512xbf16>) -> tensor<512xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_MatrixType:$weight,
                       Optional<K3_BF16Tensor>:$norm,
                       Optional<K3_BF16Tensor>:$residual,
                       OptionalAttr<F64Attr>:$eps);
  let results = (outs K3_Vector:$result);
  let assemblyFormat = [{
    $x `,` $weight (`norm` `(` $norm^ `)`)? (`residual` `(` $residual^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_AddOp : K3_Op<"add", [Pure, SameOperandsAndResultType]> {
  let summary = "residual add, rounded to bf16";
  let description = [{
    ```mlir
    %s = k3.add %a, %b : tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$lhs, K3_BF16Tensor:$rhs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def K3_MulSigmoidOp : K3_Op<"mul_sigmoid", [Pure, SameOperandsAndResultType]> {
  let summary = "output gate: x · sigmoid(g)";
  let description = [{
    ```mlir
    %o = k3.mul_sigmoid %x, %g : tensor<128xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_BF16Tensor:$gate);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$x `,` $gate attr-dict `:` type($result)";
}

def K3_ConvStepOp : K3_Op<"conv_step", [K3_StateEffects]> {
  let summary = "one token of the causal depthwise short conv, then SiLU";
  let description = [{
    Channels [offset, offset + C) of the conv state hold the last W-1 inputs;
    the op shifts `%u` in and returns `R(SiLU(conv))`.
    ```mlir
    %q = k3.conv_step %u, %w, %cs {offset = 0 : i64} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$u, K3_SmallWeight:$weight,
                       K3_ConvStateType:$conv_state, I64Attr:$offset);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$u `,` $weight `,` $conv_state attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_L2NormOp : K3_Op<"l2norm", [Pure]> {
  let summary = "per-head L2 norm with eps inside the root, then a scale";
  let description = [{
    `y = x / sqrt(Σ x² + eps) · scale` per head of `head_dim` values, fp32.
    ```mlir
    %qn = k3.l2norm %q {head_dim = 64 : i64, eps = 1.0e-06 : f64, scale = 0.125 : f64} : tensor<256xbf16> -> tensor<256xf32>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, I64Attr:$head_dim, F64Attr:$eps,
                       F64Attr:$scale);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def K3_KdaGateOp : K3_Op<"kda_gate", [Pure]> {
  let summary = "KDA decay gate g (log-space), fp32";
  let description = [{
    `z = f + dt_bias`; with `lower_bound`: `g = lb·sigmoid(exp(A_log[h])·z)`,
    else `g = -exp(A_log[h])·softplus(z)`.
    ```mlir
    %g = k3.kda_gate %f, %dt, %alog {heads = 4 : i64, lower_bound = -5.0 : f64}
           : (tensor<256xbf16>, tensor<256xf32>, tensor<4xf32>) -> tensor<256xf32>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$f, K3_F32Tensor:$dt_bias,
                       K3_F32Tensor:$a_log, I64Attr:$heads,
                       OptionalAttr<F64Attr>:$lower_bound);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = "$f `,` $dt_bias `,` $a_log attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_SigmoidOp : K3_Op<"sigmoid", [Pure]> {
  let summary = "fp32 sigmoid (KDA β)";
  let description = [{
    ```mlir
    %beta = k3.sigmoid %b : tensor<4xbf16> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x);
  let results = (outs K3_F32Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def K3_KdaStepOp : K3_Op<"kda_step", [K3_StateEffects]> {
  let summary = "one delta-rule step of the KDA state; o = Sᵀ q";
  let description = [{
    `S ← Diag(exp g) S; S ← S + β k ⊗ (v − Sᵀk); o = Sᵀ q` per head (fp32),
    with q, k already l2-normalised (q also scaled).
    ```mlir
    %o = k3.kda_step %q, %k, %v, %g, %beta, %s : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_F32Tensor:$q, K3_F32Tensor:$k, K3_BF16Tensor:$v,
                       K3_F32Tensor:$g, K3_F32Tensor:$beta,
                       K3_KdaStateType:$state);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$q `,` $k `,` $v `,` $g `,` $beta `,` $state attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_GatedRmsNormOp : K3_Op<"gated_rms_norm", [Pure]> {
  let summary = "per-head RMSNorm · weight · sigmoid(gate)";
  let description = [{
    ```mlir
    %y = k3.gated_rms_norm %o, %g, %w {head_dim = 64 : i64, eps = 1.0e-05 : f64} : (...) -> tensor<256xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_BF16Tensor:$gate,
                       K3_SmallWeight:$weight, I64Attr:$head_dim, F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$x `,` $gate `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_MlaCacheAppendOp : K3_Op<"mla_cache_append", [K3_StateEffects]> {
  let summary = "normalise the latent and write [c | k_r] at pos";
  let description = [{
    ```mlir
    k3.mla_cache_append %kv, %norm, %cache, %pos {eps = 1.0e-06 : f64} : (...) -> ()
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$kv, K3_BF16Tensor:$norm,
                       K3_MlaCacheType:$cache, Index:$pos, F64Attr:$eps);
  let assemblyFormat = "$kv `,` $norm `,` $cache `,` $pos attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_MlaAttendOp : K3_Op<"mla_attend", [MemoryEffects<[MemRead]>]> {
  let summary = "absorbed MLA attention over cache rows 0..pos";
  let description = [{
    `q̂_h = W_UK,hᵀ q_nope,h`; scores `(q̂_h·c_j + q_r,h·k_r_j)/sqrt(P+R)`;
    softmax; `o_h = W_UV,h Σ p_j c_j`; optional `gate(%g)`: `o · sigmoid(g)`.
    ```mlir
    %o = k3.mla_attend %q, %kvb, %cache, %pos gate(%g) {config = #k3.mla<...>} : (...) -> tensor<128xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$q, K3_MatrixType:$kv_b_proj,
                       K3_MlaCacheType:$cache, Index:$pos,
                       Optional<K3_BF16Tensor>:$gate, K3_MlaConfigAttr:$config);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $q `,` $kv_b_proj `,` $cache `,` $pos (`gate` `(` $gate^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_RouterOp : K3_Op<"router", [Pure]> {
  let summary = "sigmoid router: top-k ids and mixing weights";
  let description = [{
    `s = sigmoid(W x)`; rank `s + bias` (ties: lower index); weights = `s` at
    the chosen ids, renormalised and scaled. fp32.
    ```mlir
    %ids, %wts = k3.router %h, %gate, %bias {top_k = 4 : i64, renormalize = true, scaling = 1.0 : f64}
                   : (...) -> (tensor<4xi32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, K3_MatrixType:$gate,
                       K3_F32Tensor:$bias, I64Attr:$top_k, BoolAttr:$renormalize,
                       F64Attr:$scaling);
  let results = (outs RankedTensorOf<[I32]>:$ids, K3_F32Tensor:$weights);
  let assemblyFormat = "$x `,` $gate `,` $bias attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_ExpertMixOp : K3_Op<"expert_mix", [Pure]> {
  let summary = "routed expert GEMVs and their weighted mix";
  let description = [{
    `r = R(Σ_k w_k · R(w2[e_k] act(w1[e_k] z, w3[e_k] z)))` with stacked
    expert weights [E, I, Dm] / [E, Dm, I].
    ```mlir
    %r = k3.expert_mix %z, %ids, %wts, %w1, %w3, %w2 {act = #k3<activation situ>} : (...) -> tensor<128xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, RankedTensorOf<[I32]>:$ids,
                            K3_F32Tensor:$weights, K3_MatrixType:$w1,
                            K3_MatrixType:$w3, K3_MatrixType:$w2),
                       K3_ActArgs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $ids `,` $weights `,` $w1 `,` $w3 `,` $w2 attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_SituOp : K3_Op<"situ", [Pure, SameOperandsAndResultType]> {
  let summary = "SiTU(g, u) = softcap(g, β1)·sigmoid(g)·softcap(u, β2)";
  let description = [{
    Without `linear_beta` the up branch is plain u. fp32, rounded to bf16.
    ```mlir
    %a = k3.situ %g, %u {beta = 4.0 : f64, linear_beta = 25.0 : f64} : tensor<128xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$gate, K3_BF16Tensor:$up, F64Attr:$beta,
                       OptionalAttr<F64Attr>:$linear_beta);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def K3_SwigluOp : K3_Op<"swiglu", [Pure, SameOperandsAndResultType]> {
  let summary = "SwiGLU(g, u) = SiLU(g)·u";
  let description = [{
    ```mlir
    %a = k3.swiglu %g, %u : tensor<128xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$gate, K3_BF16Tensor:$up);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Fused ops
//
// What the fusion passes build out of fine-op chains. Each rounds at exactly
// the points of the chain it replaces (docs/NUMERICS.md), so fused and
// unfused graphs decode the same tokens; each maps to one kernel entry point.
//===----------------------------------------------------------------------===//

def K3_KdaDecodeOp : K3_Op<"kda_decode", [AttrSizedOperandSegments, K3_StateEffects]> {
  let summary = "one KDA token step: short convs, l2norm, gate, β, recurrence, gated norm";
  let description = [{
    The KDA mixer between its projections (KdaDecodeParams), as built by
    `k3-fuse-kda` from `conv_step` ×3 (channels [0, C), [C, 2C), [2C, 3C) of
    the conv state), `l2norm` ×2 (q scaled by 1/sqrt(d), k by 1, eps 1e-6),
    `kda_gate`, `sigmoid`, `kda_step` and `gated_rms_norm`. `%uq`, `%uk`,
    `%uv` are the q/k/v projections, `%f` the gate input R(f_b(R(f_a h))),
    `%beta` the β logits R(b_proj h), `%gt` the output gate R(g_proj h).
    q̃, k̃, ṽ and o are rounded to bf16 inside as in the chain; `eps` is the
    gated norm's. The conv state and the recurrent state are updated in
    place. `config.full_rank_gate` only records where `%gt` came from.

    The low-rank form (`k3-fuse-kda` with `low-rank-gates`): with
    `f_b(%w)` [C, r], `%f` is R(f_a h) [r] and the op computes
    f = R(%w · %f) itself, exactly the `k3.linear` it replaced; with
    `g_b(%w)` likewise for `%gt`. The two small projections then stop being
    launches of their own.
    ```mlir
    %y = k3.kda_decode %uq, %uk, %uv, %f, %beta, %gt, %conv, %s
           weights(%qc, %kc, %vc, %dt, %alog, %onorm)
           {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>,
            eps = 1.0e-05 : f64} : (...) -> tensor<8xbf16>
    %y2 = k3.kda_decode %uq, %uk, %uv, %fa, %beta, %ga, %conv, %s
           weights(%qc, %kc, %vc, %dt, %alog, %onorm) f_b(%fb) g_b(%gb)
           {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>,
            eps = 1.0e-05 : f64} : (...) -> tensor<8xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$uq, K3_BF16Tensor:$uk,
      K3_BF16Tensor:$uv, K3_BF16Tensor:$f, K3_BF16Tensor:$beta_logit,
      K3_BF16Tensor:$gate, K3_ConvStateType:$conv_state,
      K3_KdaStateType:$state, K3_SmallWeight:$q_conv, K3_SmallWeight:$k_conv,
      K3_SmallWeight:$v_conv, K3_F32Tensor:$dt_bias, K3_F32Tensor:$a_log,
      K3_SmallWeight:$o_norm, Optional<RankedTensorOf<[BF16]>>:$f_b,
      Optional<RankedTensorOf<[BF16]>>:$g_b, K3_KdaConfigAttr:$config,
      F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $uq `,` $uk `,` $uv `,` $f `,` $beta_logit `,` $gate `,` $conv_state `,` $state
    `weights` `(` $q_conv `,` $k_conv `,` $v_conv `,` $dt_bias `,` $a_log `,` $o_norm `)`
    (`f_b` `(` $f_b^ `)`)? (`g_b` `(` $g_b^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MlaDecodeOp : K3_Op<"mla_decode", [K3_StateEffects]> {
  let summary = "MLA cache append, absorbed attend and output gate";
  let description = [{
    The cache row at `%pos` becomes `[RMSNorm(kv[:L], kv_a_norm, eps) |
    kv[L:]]`; then absorbed attention of `%q` over rows 0..pos (the append
    happens first); with `gate(%g)` the output is `R(R(o) · sigmoid(g))`.
    Built by `k3-fuse-mla` from `mla_cache_append` → `mla_attend` (→
    `mul_sigmoid`). `%kv` is the latent projection R(kv_a h) [L+R] and `%q`
    the query projection [N(P+R)]: both stay projections of their own, so
    the norm and projection fusions can treat them as one (the MLA's
    q/q_a and kv_a read the same normed input). The result is o [N·V],
    o_proj's input. `config.output_gate` says whether the op has the gate
    operand.
    ```mlir
    %o = k3.mla_decode %kv, %q weights(%kvan, %kvb) cache(%cache, %pos) gate(%g)
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>,
            eps = 1.0e-06 : f64} : (...) -> tensor<8xbf16>
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$kv, K3_BF16Tensor:$q,
      K3_BF16Tensor:$kv_a_norm, K3_MatrixType:$kv_b_proj,
      K3_MlaCacheType:$cache, Index:$pos, Optional<K3_BF16Tensor>:$gate,
      K3_MlaConfigAttr:$config, F64Attr:$eps);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $kv `,` $q `weights` `(` $kv_a_norm `,` $kv_b_proj `)`
    `cache` `(` $cache `,` $pos `)` (`gate` `(` $gate^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_RoutedExpertsOp : K3_Op<"routed_experts", [Pure]> {
  let summary = "router, top-k routed experts, their weighted mix and the latent norm";
  let description = [{
    The sigmoid router on `%x` (as `k3.router`) picks `top_k` experts; each
    runs its gated MLP on `%z` (equal to `%x` without latent MoE) and
    `r = R(Σ_k w_k · y_k)`; with `norm(%w)` the mix is then RMSNorm-ed
    (`eps`) as `k3.rms_norm` does. Built by `k3-fuse-moe` from `router` →
    `expert_mix` (→ `rms_norm`).
    ```mlir
    %r = k3.routed_experts %h, %z router(%gate, %bias) experts(%w1, %w3, %w2) norm(%n)
           {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation situ>,
            situ_beta = 4.0 : f64, eps = 1.0e-05 : f64} : (...) -> tensor<32xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, K3_BF16Tensor:$z,
                            K3_MatrixType:$gate, K3_F32Tensor:$bias,
                            K3_MatrixType:$w1, K3_MatrixType:$w3,
                            K3_MatrixType:$w2,
                            Optional<K3_BF16Tensor>:$norm,
                            I64Attr:$top_k, BoolAttr:$renormalize,
                            F64Attr:$scaling),
                       K3_ActArgs, (ins OptionalAttr<F64Attr>:$eps));
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $z `router` `(` $gate `,` $bias `)` `experts` `(` $w1 `,` $w3 `,` $w2 `)`
    (`norm` `(` $norm^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_MoeFfnOp : K3_Op<"moe_ffn", [AttrSizedOperandSegments, Pure]> {
  let summary = "a whole MoE feed-forward block: pre-norm, router, routed and shared experts, residual";
  let description = [{
    The FFN half of a MoE layer without latent projections (Kimi-Linear):
    `x̂ = RMSNorm(h, norm, eps)`; the sigmoid router on `x̂` (as
    `k3.router`) picks `top_k` experts; `r = R(Σ_k w_k · y_k)` over their
    gated MLPs on `x̂`; with `shared(...)` `r = R(r + s)`, `s` the shared
    gated MLP's bf16 output on `x̂`; the result is `R(h + r)`. Every rounding
    point is that of the chain it replaces (NUMERICS.md "MoE"). Built by
    `k3-fuse-moe-ffn` from `rms_norm` → `routed_experts` (+ the shared
    `linear`s and activation) → `add`; lowered to a `router` and one
    `moe_experts` launch.
    ```mlir
    %y = k3.moe_ffn %h norm(%n) router(%gate, %bias) experts(%w1, %w3, %w2) shared(%s1, %s3, %s2)
           {top_k = 8 : i64, renormalize = true, scaling = 2.446 : f64, act = #k3<activation silu>,
            eps = 1.0e-05 : f64} : (...) -> tensor<2304xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$h, K3_BF16Tensor:$norm,
                            K3_MatrixType:$gate, K3_F32Tensor:$bias,
                            K3_MatrixType:$w1, K3_MatrixType:$w3,
                            K3_MatrixType:$w2,
                            Optional<K3_MatrixType>:$shared_w1,
                            Optional<K3_MatrixType>:$shared_w3,
                            Optional<K3_MatrixType>:$shared_w2,
                            I64Attr:$top_k, BoolAttr:$renormalize,
                            F64Attr:$scaling, F64Attr:$eps),
                       K3_ActArgs);
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $h `norm` `(` $norm `)` `router` `(` $gate `,` $bias `)` `experts` `(` $w1 `,` $w3 `,` $w2 `)`
    (`shared` `(` $shared_w1^ `,` $shared_w3 `,` $shared_w2 `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_GatedMlpOp : K3_Op<"gated_mlp", [AttrSizedOperandSegments, Pure]> {
  let summary = "a whole gated MLP in one kernel: w2 · act(w1 x̂, w3 x̂) (+ residual)";
  let description = [{
    `x̂ = x`, or `RMSNorm(x, norm, eps)` with `norm(%w)`; `g = R(w1 x̂)`,
    `u = R(w3 x̂)`, `a = R(act(g, u))`, `y = R(w2 a)`, and with
    `residual(%r)`: `R(y + r)` (GatedMlpParams). Built by `k3-fuse-mlp` from
    `linear(w1)`, `linear(w3)` → `situ`/`swiglu` → `linear(w2)`.
    ```mlir
    %y = k3.gated_mlp %x, %w1, %w3, %w2 norm(%n) residual(%r)
           {act = #k3<activation silu>, eps = 1.0e-05 : f64} : (...) -> tensor<8xbf16>
    ```
  }];
  let arguments = !con((ins K3_BF16Tensor:$x, K3_MatrixType:$w1,
                            K3_MatrixType:$w3, K3_MatrixType:$w2,
                            Optional<K3_BF16Tensor>:$norm,
                            Optional<K3_BF16Tensor>:$residual),
                       K3_ActArgs, (ins OptionalAttr<F64Attr>:$eps));
  let results = (outs K3_BF16Tensor:$result);
  let assemblyFormat = [{
    $x `,` $w1 `,` $w3 `,` $w2 (`norm` `(` $norm^ `)`)? (`residual` `(` $residual^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LinearGroupOp : K3_Op<"linear_group", [AttrSizedOperandSegments, Pure]> {
  let summary = "several projections of one input in one launch (horizontal fusion)";
  let description = [{
    `result_i = R(W_i x̂)` for every weight, where `x̂ = x`, or with
    `norm(%w)` the RMSNorm of `x` with weight `%w` and `eps`, computed once
    (LinearMultiParams). Result i is exactly what `k3.linear %x, %w_i`
    with the same norm and eps gives, bit for bit: the fused
    norm rounds as `k3.rms_norm` does and every row is its own dot product.
    There is no residual epilogue and no fp32 output. 1 to 8 weights
    (kLinearMultiMax), each [n_i, k] with k = len(x), bf16 or MXFP4. Built
    by `k3-fuse-projections` from `k3.linear`s of the same input.
    ```mlir
    %q, %k, %b = k3.linear_group %x, %wq, %wk, %wb norm(%nw) {eps = 1.0e-05 : f64}
                   : (tensor<256xbf16>, tensor<256x256xbf16>, tensor<256x256xbf16>, tensor<4x256xbf16>,
                      tensor<256xbf16>) -> (tensor<256xbf16>, tensor<256xbf16>, tensor<4xbf16>)
    ```
  }];
  let arguments = (ins K3_BF16Tensor:$x, Variadic<K3_MatrixType>:$weights,
                       Optional<K3_BF16Tensor>:$norm,
                       OptionalAttr<F64Attr>:$eps);
  let results = (outs Variadic<K3_BF16Tensor>:$results);
  let assemblyFormat = [{
    $x `,` $weights (`norm` `(` $norm^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_OPS_TD
