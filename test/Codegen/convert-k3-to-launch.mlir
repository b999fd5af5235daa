// convert-k3-to-launch: weights, state and scratch become k3l pointers, each
// fine k3 op the launch of its kernel with the params fields bound by name.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s
// The lowered IR verifies and round-trips.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | k3-opt -split-input-file | FileCheck %s
// No k3 op survives in any function (only k3l ops, which name theirs in op = "k3.<op>").
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=NOK3
// NOK3-NOT: {{^ *(%[^ ]+ = )?k3\.[a-z_]+ }}
// NOK3: func.func @decode_step
// NOK3-NOT: {{^ *(%[^ ]+ = )?k3\.[a-z_]+ }}
// NOK3: func.func @kda_fine
// NOK3-NOT: {{^ *(%[^ ]+ = )?k3\.[a-z_]+ }}
// NOK3: func.func @fused
// NOK3-NOT: {{^ *(%[^ ]+ = )?k3\.[a-z_]+ }}

// CHECK-LABEL: func.func @decode_step
// The step keeps (token, pos) and returns nothing: the logits are a buffer.
// CHECK-SAME: (%{{.*}}: i32, %{{.*}}: index) {
// CHECK-NOT: k3.

// embed binds the token as an input, and the step block (the same token in
// memory, kernels/common/StepInputs.h) as a pointer input.
// CHECK: %[[TABLE:.*]] = k3l.weight "embed.weight" {format = "bf16", shape = array<i64: 64, 32>} : !k3l.ptr
// CHECK: %[[X:.*]] = k3l.alloc {bytes = 64 : i64, dtype = "bf16", elems = 32 : i64, name = "embed"} : !k3l.ptr
// CHECK: k3l.launch "embed"(%[[TABLE]], %[[X]])
// CHECK-SAME: arg_names = ["table", "out"], arg_offsets = array<i64: 0, 0>
// CHECK-SAME: inputs = {step = "step", token = "token"}, op = "k3.embed", scalars = {dim = 32 : i64, vocab = 64 : i64}

// linear with a fused input norm and a residual. 32 rows would be 4 blocks
// of 8 warps; the grid is at least two blocks per SM of the target (264), so
// the kernel splits each row over warps.
// CHECK: %[[NW:.*]] = k3l.weight "norm.weight" {format = "bf16", shape = array<i64: 32>}
// CHECK: %[[W:.*]] = k3l.weight "proj.weight" {format = "bf16", shape = array<i64: 32, 32>}
// CHECK: %[[Y:.*]] = k3l.alloc {bytes = 64 : i64, dtype = "bf16", elems = 32 : i64, name = "linear"}
// CHECK: k3l.launch "linear"(%[[X]], %[[W]], %[[NW]], %[[X]], %[[Y]])
// CHECK-SAME: arg_names = ["x", "w", "normWeight", "residual", "out"]
// CHECK-SAME: grid = array<i64: 264, 1, 1>
// CHECK-SAME: inputs = {}, op = "k3.linear", scalars = {k = 32 : i64, n = 32 : i64, normEps = 1.000000e-05 : f64}

// kda_conv over channels [32, 64) of the conv state: 32 channels x 3 fp32
// history values = byte 384.
// CHECK: %[[CS:.*]] = k3l.state "layers.0.conv" {bytes = 1152 : i64, kind = "conv_state", shape = array<i64: 96, 3>}
// CHECK: %[[CW:.*]] = k3l.weight "k_conv1d.weight" {format = "bf16", shape = array<i64: 32, 1, 4>}
// CHECK: %[[C:.*]] = k3l.alloc {{{.*}}name = "conv"}
// CHECK: k3l.launch "kda_conv"(%[[Y]], %[[CW]], %[[CS]], %[[C]])
// CHECK-SAME: arg_names = ["u", "weight", "state", "out"], arg_offsets = array<i64: 0, 0, 384, 0>
// CHECK-SAME: scalars = {channels = 32 : i64, width = 4 : i64}

// The MLA cache append binds pos, the attend length (= pos + 1).
// CHECK: %[[CACHE:.*]] = k3l.state "layers.1.mla" {bytes = 3072 : i64, kind = "mla_cache", shape = array<i64: 64, 24>}
// CHECK: %[[KVN:.*]] = k3l.weight "kv_a_layernorm.weight"
// CHECK: %[[KV:.*]] = k3l.alloc {bytes = 48 : i64, dtype = "bf16", elems = 24 : i64, name = "linear"}
// CHECK: k3l.launch "mla_cache_append"(%[[KV]], %[[KVN]], %[[CACHE]])
// CHECK-SAME: arg_names = ["kv", "normWeight", "cache"]
// CHECK-SAME: inputs = {pos = "pos", step = "step"}
// CHECK-SAME: scalars = {eps = {{.*}}, kvLoraRank = 16 : i64, ropeDim = 8 : i64}
// CHECK: %[[KVB:.*]] = k3l.weight "kv_b_proj.weight"
// CHECK: %[[ATT:.*]] = k3l.alloc {bytes = 32 : i64, dtype = "bf16", elems = 16 : i64, name = "mla_attend"}
// L <= 512, R <= 64, multiples of 8 (the all-heads attend from 4096 rows):
// one block per SM.
// CHECK: k3l.launch "mla_attend"(%[[C]], %[[KVB]], %[[CACHE]], %[[ATT]])
// CHECK-SAME: arg_names = ["q", "kvB", "cache", "out"]
// CHECK-SAME: grid = array<i64: 132, 1, 1>
// CHECK-SAME: inputs = {length = "length", step = "step"}, op = "k3.mla_attend"
// CHECK-SAME: scalars = {kvLoraRank = 16 : i64, nopeDim = 8 : i64, numHeads = 2 : i64, ropeDim = 8 : i64, scale = 2.500000e-01 : f64, vDim = 8 : i64}

// router writes i32 ids and f32 weights that moe_experts reads.
// CHECK: %[[GATE:.*]] = k3l.weight "gate.weight"
// CHECK: %[[BIAS:.*]] = k3l.weight "gate.e_score_correction_bias" {format = "f32", shape = array<i64: 4>}
// CHECK: %[[IDS:.*]] = k3l.alloc {bytes = 8 : i64, dtype = "i32", elems = 2 : i64, name = "router_ids"}
// CHECK: %[[WTS:.*]] = k3l.alloc {bytes = 8 : i64, dtype = "f32", elems = 2 : i64, name = "router_weights"}
// CHECK: k3l.launch "router"(%[[ATT]], %[[GATE]], %[[BIAS]], %[[IDS]], %[[WTS]])
// CHECK-SAME: arg_names = ["h", "gate", "bias", "outIds", "outWeights"]
// CHECK-SAME: scalars = {dim = 16 : i64, numExperts = 4 : i64, renormalize = 1 : i64, scaling = 2.500000e+00 : f64, topK = 2 : i64}
// CHECK: %[[E1:.*]] = k3l.weight "experts.{e}.w1.weight" {format = "bf16", shape = array<i64: 4, 8, 16>}
// CHECK: %[[E3:.*]] = k3l.weight "experts.{e}.w3.weight"
// CHECK: %[[E2:.*]] = k3l.weight "experts.{e}.w2.weight"
// CHECK: %[[MIX:.*]] = k3l.alloc {{{.*}}name = "expert_mix"}
// CHECK: k3l.launch "moe_experts"(%[[ATT]], %[[IDS]], %[[WTS]], %[[E1]], %[[E3]], %[[E2]], %[[MIX]])
// CHECK-SAME: arg_names = ["x", "ids", "weights", "w1", "w3", "w2", "out"]
// CHECK-SAME: op = "k3.expert_mix"
// CHECK-SAME: scalars = {activation = 1 : i64, dim = 16 : i64, interDim = 8 : i64, numExperts = 4 : i64, topK = 2 : i64}

// An f32 linear writes outF32; its buffer is the step's logits.
// CHECK: %[[HEAD:.*]] = k3l.weight "lm_head.weight"
// CHECK: %[[LOGITS:.*]] = k3l.alloc {bytes = 256 : i64, dtype = "f32", elems = 64 : i64, name = "linear"}
// CHECK: k3l.launch "linear"(%[[MIX]], %[[HEAD]], %[[LOGITS]])
// CHECK-SAME: arg_names = ["x", "w", "outF32"]
// CHECK: k3l.logits %[[LOGITS]] : !k3l.ptr
// The greedy choice on the device ends the step: argmax over the logits
// writes the next token into the step block.
// CHECK-NEXT: k3l.launch "argmax"(%[[LOGITS]])
// CHECK-SAME: arg_names = ["logits"]
// CHECK-SAME: inputs = {step = "step"}, op = "func.return", scalars = {n = 64 : i64}
// CHECK-NEXT: return{{$}}
func.func @decode_step(%tok: i32, %pos: index) -> tensor<64xf32> {
  %table = k3.weight "embed.weight" : tensor<64x32xbf16>
  %x = k3.embed %tok, %table : tensor<64x32xbf16> -> tensor<32xbf16>
  %nw = k3.weight "norm.weight" : tensor<32xbf16>
  %w = k3.weight "proj.weight" : tensor<32x32xbf16>
  %y = k3.linear %x, %w norm(%nw) residual(%x) {eps = 1.0e-05 : f64}
         : (tensor<32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>) -> tensor<32xbf16>
  %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 96, window = 3>
  %cw = k3.weight "k_conv1d.weight" : tensor<32x1x4xbf16>
  %c = k3.conv_step %y, %cw, %cs {offset = 32 : i64}
         : (tensor<32xbf16>, tensor<32x1x4xbf16>, !k3.conv_state<channels = 96, window = 3>) -> tensor<32xbf16>
  %cache = k3.state "layers.1.mla" : !k3.mla_cache<max_seq = 64, width = 24>
  %kvn = k3.weight "kv_a_layernorm.weight" : tensor<16xbf16>
  %kva = k3.weight "kv_a.weight" : tensor<24x32xbf16>
  %kv = k3.linear %c, %kva : (tensor<32xbf16>, tensor<24x32xbf16>) -> tensor<24xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<24xbf16>, tensor<16xbf16>, !k3.mla_cache<max_seq = 64, width = 24>, index) -> ()
  %kvb = k3.weight "kv_b_proj.weight" : tensor<32x16xbf16>
  %att = k3.mla_attend %c, %kvb, %cache, %pos
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 16, nope = 8, rope = 8, v_dim = 8>}
           : (tensor<32xbf16>, tensor<32x16xbf16>, !k3.mla_cache<max_seq = 64, width = 24>, index) -> tensor<16xbf16>
  %gate = k3.weight "gate.weight" : tensor<4x16xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<4xf32>
  %ids, %wts = k3.router %att, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 2.5 : f64}
                 : (tensor<16xbf16>, tensor<4x16xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %e1 = k3.weight "experts.{e}.w1.weight" : tensor<4x8x16xbf16>
  %e3 = k3.weight "experts.{e}.w3.weight" : tensor<4x8x16xbf16>
  %e2 = k3.weight "experts.{e}.w2.weight" : tensor<4x16x8xbf16>
  %mix = k3.expert_mix %att, %ids, %wts, %e1, %e3, %e2 {act = #k3<activation silu>}
           : (tensor<16xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<4x8x16xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>) -> tensor<16xbf16>
  %head = k3.weight "lm_head.weight" : tensor<64x16xbf16>
  %logits = k3.linear %mix, %head : (tensor<16xbf16>, tensor<64x16xbf16>) -> tensor<64xf32>
  return %logits : tensor<64xf32>
}

// -----

// The KDA chain's fine kernels get the values their params need: the conv
// width from the weights (3, not head_dim 4) and the state offset of the
// k slice (8 channels x 2 history values x 4 bytes = 64); the l2norm eps and
// scale; the gate's lower bound only with hasLowerBound = 1; the gated
// norm's eps; SiTU's beta1/beta2 (hasBeta2 = 0 without the linear branch)
// and SwiGLU's activation = 1 without betas; the rms_norm eps (1e-6, as for
// the q_a / kv_a layernorms). The conv filter and o_norm, as the importer
// declares them (!k3.vector_weight), are plan weights of format "vector"
// (bound bf16 or f32 as the checkpoint stores them).
// CHECK-LABEL: func.func @kda_fine
// CHECK: %[[CS:.*]] = k3l.state "layers.0.conv" {bytes = 192 : i64, kind = "conv_state", shape = array<i64: 24, 2>}
// CHECK: %[[CW:.*]] = k3l.weight "q_conv1d.weight" {format = "vector", shape = array<i64: 8, 1, 3>}
// CHECK: %[[QC:.*]] = k3l.alloc {{{.*}}name = "conv"}
// CHECK: k3l.launch "kda_conv"(%{{.*}}, %[[CW]], %[[CS]], %[[QC]])
// CHECK-SAME: arg_offsets = array<i64: 0, 0, 64, 0>
// CHECK-SAME: scalars = {channels = 8 : i64, width = 3 : i64}
// CHECK: k3l.launch "kda_l2norm"(%[[QC]],
// CHECK-SAME: grid = array<i64: 2, 1, 1>
// CHECK-SAME: scalars = {eps = 9.9999999999999995E-7 : f64, headDim = 4 : i64, n = 8 : i64, scale = 5.000000e-01 : f64}
// CHECK: k3l.launch "kda_l2norm"(%[[QC]],
// CHECK-SAME: scalars = {eps = 9.9999999999999995E-7 : f64, headDim = 4 : i64, n = 8 : i64, scale = 1.000000e+00 : f64}
// CHECK: k3l.launch "kda_gate"
// CHECK-SAME: scalars = {hasLowerBound = 1 : i64, headDim = 4 : i64, lowerBound = -5.000000e+00 : f64, numHeads = 2 : i64}
// CHECK: k3l.launch "kda_gate"
// CHECK-SAME: scalars = {hasLowerBound = 0 : i64, headDim = 4 : i64, numHeads = 2 : i64}
// CHECK: k3l.launch "sigmoid"
// CHECK-SAME: scalars = {n = 2 : i64}
// CHECK: k3l.launch "kda_step"
// CHECK-SAME: scalars = {headDim = 4 : i64, numHeads = 2 : i64}
// CHECK: %[[ON:.*]] = k3l.weight "o_norm.weight" {format = "vector", shape = array<i64: 4>}
// CHECK: k3l.launch "kda_gated_norm"(%{{.*}}, %{{.*}}, %[[ON]],
// CHECK-SAME: scalars = {eps = 2.000000e-05 : f64, headDim = 4 : i64, numHeads = 2 : i64}
// CHECK: k3l.launch "gated_act"
// CHECK-SAME: op = "k3.situ", scalars = {activation = 0 : i64, beta1 = 3.000000e+00 : f64, beta2 = 2.000000e+01 : f64, hasBeta2 = 1 : i64, n = 8 : i64}
// CHECK: k3l.launch "gated_act"
// CHECK-SAME: op = "k3.situ", scalars = {activation = 0 : i64, beta1 = 3.000000e+00 : f64, hasBeta2 = 0 : i64, n = 8 : i64}
// CHECK: k3l.launch "gated_act"
// CHECK-SAME: op = "k3.swiglu", scalars = {activation = 1 : i64, n = 8 : i64}
// CHECK: k3l.launch "rms_norm"
// CHECK-SAME: scalars = {eps = 9.9999999999999995E-7 : f64, n = 8 : i64}
// CHECK: k3l.launch "linear"
// CHECK-SAME: arg_names = ["x", "w", "outF32"]
// CHECK: k3l.logits
func.func @kda_fine(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 2>
  %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  %cw = k3.weight "q_conv1d.weight" : !k3.vector_weight<8x1x3>
  %qc = k3.conv_step %x, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, !k3.vector_weight<8x1x3>, !k3.conv_state<channels = 24, window = 2>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %dt = k3.weight "dt_bias" : tensor<8xf32>
  %alog = k3.weight "A_log" : tensor<2xf32>
  %g = k3.kda_gate %x, %dt, %alog {heads = 2 : i64, lower_bound = -5.0 : f64}
         : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %g2 = k3.kda_gate %x, %dt, %alog {heads = 2 : i64}
         : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %wb = k3.weight "b_proj.weight" : tensor<2x8xbf16>
  %bl = k3.linear %x, %wb : (tensor<8xbf16>, tensor<2x8xbf16>) -> tensor<2xbf16>
  %beta = k3.sigmoid %bl : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %qc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %on = k3.weight "o_norm.weight" : !k3.vector_weight<4>
  %y = k3.gated_rms_norm %o, %x, %on {head_dim = 4 : i64, eps = 2.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, !k3.vector_weight<4>) -> tensor<8xbf16>
  %a1 = k3.situ %y, %y {beta = 3.0 : f64, linear_beta = 20.0 : f64} : tensor<8xbf16>
  %a2 = k3.situ %a1, %a1 {beta = 3.0 : f64} : tensor<8xbf16>
  %a3 = k3.swiglu %a2, %a2 : tensor<8xbf16>
  %nw = k3.weight "q_a_layernorm.weight" : tensor<8xbf16>
  %n = k3.rms_norm %a3, %nw {eps = 1.0e-06 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x8xbf16>
  %logits = k3.linear %n, %head : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// The fused ops: kda_decode's convWidth (3), hasLowerBound / lowerBound and
// normEps, and the three conv-state slices (64 bytes apart); mla_decode's
// cache append eps and the attend's score scale 1/sqrt(nope + rope) =
// 1/sqrt(12) (nope 8, rope 4, v_dim 6 and kv_lora 8 all differ, so a scale
// from any other dimension shows); routed_experts' router scalars (top 3,
// no renormalisation, scaling 2.5), expert betas and latent norm eps;
// gated_mlp's normEps and betas; attn_res's normEps only with then_norm
// (as attn_res_clustered, the default).
// CHECK-LABEL: func.func @fused
// CHECK: k3l.launch "kda_decode"
// CHECK-SAME: arg_offsets = array<i64: 0, 0, 0, 0, 0, 0, 0, 64, 128, 0, 0, 0, 0, 0, 0, 0, 0>
// CHECK-SAME: scalars = {convWidth = 3 : i64, hasLowerBound = 1 : i64, headDim = 4 : i64, lowerBound = -5.000000e+00 : f64, normEps = 2.000000e-05 : f64, numHeads = 2 : i64}
// CHECK: k3l.launch "kda_decode"
// CHECK-SAME: scalars = {convWidth = 3 : i64, hasLowerBound = 0 : i64, headDim = 4 : i64, normEps = 1.000000e-05 : f64, numHeads = 2 : i64}
// CHECK: %[[KVA:.*]] = k3l.weight "kv_a.weight"
// CHECK: k3l.launch "linear"(%{{.*}}, %[[KVA]], %[[KV:.*]]) {{.*}} op = "k3.linear"
// CHECK: k3l.launch "mla_cache_append"(%[[KV]],
// CHECK-SAME: op = "k3.mla_decode", scalars = {eps = 9.9999999999999995E-7 : f64, kvLoraRank = 8 : i64, ropeDim = 4 : i64}
// CHECK: k3l.launch "mla_attend"
// CHECK-SAME: arg_names = ["q", "kvB", "cache", "gate", "out"]
// CHECK-SAME: op = "k3.mla_decode", scalars = {kvLoraRank = 8 : i64, nopeDim = 8 : i64, numHeads = 2 : i64, ropeDim = 4 : i64, scale = 0.2886751{{[0-9]*}} : f64, vDim = 6 : i64}
// CHECK: k3l.launch "router"
// CHECK-SAME: op = "k3.routed_experts", scalars = {dim = 8 : i64, numExperts = 4 : i64, renormalize = 0 : i64, scaling = 2.500000e+00 : f64, topK = 3 : i64}
// CHECK: k3l.launch "moe_experts"
// CHECK-SAME: op = "k3.routed_experts", scalars = {activation = 0 : i64, beta1 = 3.000000e+00 : f64, beta2 = 2.000000e+01 : f64, dim = 8 : i64, hasBeta2 = 1 : i64, interDim = 16 : i64, numExperts = 4 : i64, topK = 3 : i64}
// CHECK: k3l.launch "rms_norm"
// CHECK-SAME: op = "k3.routed_experts", scalars = {eps = 2.000000e-05 : f64, n = 8 : i64}
// CHECK: k3l.launch "gated_mlp"
// CHECK-SAME: arg_names = ["x", "normWeight", "w1", "w3", "w2", "residual", "out"]
// CHECK-SAME: scalars = {activation = 0 : i64, beta1 = 3.000000e+00 : f64, hasBeta2 = 0 : i64, inDim = 8 : i64, interDim = 32 : i64, normEps = 9.9999999999999995E-7 : f64, outDim = 8 : i64}
// CHECK: k3l.launch "attn_res_clustered"
// CHECK-SAME: arg_names = ["blocks", "extra", "wNorm", "wProj", "out"]
// CHECK-SAME: scalars = {dim = 8 : i64, eps = 2.000000e-05 : f64, numBlocks = 2 : i64}
// CHECK: k3l.launch "attn_res_clustered"
// CHECK-SAME: arg_names = ["blocks", "extra", "wNorm", "wProj", "normWeight", "out"]
// CHECK-SAME: scalars = {dim = 8 : i64, eps = 9.9999999999999995E-7 : f64, normEps = 9.9999999999999995E-7 : f64, numBlocks = 3 : i64}
// CHECK: k3l.logits
func.func @fused(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 2>
  %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  %cw = k3.weight "conv1d.weight" : tensor<8x1x3xbf16>
  %dt = k3.weight "dt_bias" : tensor<8xf32>
  %alog = k3.weight "A_log" : tensor<2xf32>
  %on = k3.weight "o_norm.weight" : tensor<4xbf16>
  %b = k3.weight "b" : tensor<2xbf16>
  %k1 = k3.kda_decode %x, %x, %x, %x, %b, %x, %cs, %s weights(%cw, %cw, %cw, %dt, %alog, %on)
          {config = #k3.kda<heads = 2, head_dim = 4, conv = 3, full_rank_gate = true, lower_bound = -5.0 : f64>, eps = 2.0e-05 : f64}
          : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<8xbf16>,
             !k3.conv_state<channels = 24, window = 2>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  %k2 = k3.kda_decode %k1, %k1, %k1, %k1, %b, %k1, %cs, %s weights(%cw, %cw, %cw, %dt, %alog, %on)
          {config = #k3.kda<heads = 2, head_dim = 4, conv = 3>, eps = 1.0e-05 : f64}
          : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<8xbf16>,
             !k3.conv_state<channels = 24, window = 2>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  %cache = k3.state "layers.1.mla" : !k3.mla_cache<max_seq = 64, width = 12>
  %q = k3.weight "q" : tensor<24xbf16>
  %kva = k3.weight "kv_a.weight" : tensor<12x8xbf16>
  %kvn = k3.weight "kv_a_layernorm.weight" : tensor<8xbf16>
  %kvb = k3.weight "kv_b.weight" : tensor<28x8xbf16>
  %wg = k3.weight "g_proj.weight" : tensor<12x8xbf16>
  %gt = k3.linear %k2, %wg : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  %kv = k3.linear %k2, %kva : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  %m = k3.mla_decode %kv, %q weights(%kvn, %kvb) cache(%cache, %pos) gate(%gt)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 8, rope = 4, v_dim = 6, output_gate = true>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<24xbf16>, tensor<8xbf16>, tensor<28x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index, tensor<12xbf16>) -> tensor<12xbf16>
  %wo = k3.weight "o_proj.weight" : tensor<8x12xbf16>
  %h = k3.linear %m, %wo : (tensor<12xbf16>, tensor<8x12xbf16>) -> tensor<8xbf16>
  %gate = k3.weight "gate.weight" : tensor<4x8xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<4xf32>
  %e13 = k3.weight "experts.{e}.w1.weight" : tensor<4x16x8xbf16>
  %e2 = k3.weight "experts.{e}.w2.weight" : tensor<4x8x16xbf16>
  %rn = k3.weight "routed_expert_norm.weight" : tensor<8xbf16>
  %r = k3.routed_experts %h, %h router(%gate, %bias) experts(%e13, %e13, %e2) norm(%rn)
         {act = #k3<activation situ>, eps = 2.0e-05 : f64, renormalize = false, scaling = 2.5 : f64,
          situ_beta = 3.0 : f64, situ_linear_beta = 20.0 : f64, top_k = 3 : i64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %n = k3.weight "post_attention_layernorm.weight" : tensor<8xbf16>
  %w1 = k3.weight "mlp.gate_proj.weight" : tensor<32x8xbf16>
  %w3 = k3.weight "mlp.up_proj.weight" : tensor<32x8xbf16>
  %w2 = k3.weight "mlp.down_proj.weight" : tensor<8x32xbf16>
  %d = k3.gated_mlp %r, %w1, %w3, %w2 norm(%n) residual(%r)
         {act = #k3<activation situ>, eps = 1.0e-06 : f64, situ_beta = 3.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %blocks = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>
  %arn = k3.weight "attn_res_norm.weight" : tensor<8xbf16>
  %arp = k3.weight "attn_res_proj.weight" : tensor<1x8xbf16>
  %a1 = k3.attn_res %blocks, %d, %arn, %arp {count = 2 : i64, eps = 2.0e-05 : f64}
          : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  %fn = k3.weight "norm.weight" : tensor<8xbf16>
  %a2 = k3.attn_res %blocks, %a1, %arn, %arp then_norm(%fn) {count = 3 : i64, eps = 1.0e-06 : f64}
          : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x8xbf16>
  %logits = k3.linear %a2, %head : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// k3.linear_group: one linear_multi launch. x, the norm weight and its eps
// are shared; entry i binds w<i>, out<i> (a fresh buffer per result, in
// result order) and n<i>; count is the number of entries. The grid is
// gemvGrid over the rows of all entries: with the fused norm at most four
// blocks per SM (528 for 8258 rows), without it a warp per row of
// 2304 + 2304 rows (576 blocks, where each entry alone would get 288).
// CHECK-LABEL: func.func @projections
// CHECK: %[[X:.*]] = k3l.alloc {{{.*}}name = "embed"}
// CHECK: %[[N:.*]] = k3l.weight "input_layernorm.weight"
// CHECK: %[[WQ:.*]] = k3l.weight "q_proj.weight" {format = "bf16", shape = array<i64: 8192, 32>}
// CHECK: %[[WK:.*]] = k3l.weight "k_proj" {format = "mxfp4", shape = array<i64: 64, 32>}
// CHECK: %[[WB:.*]] = k3l.weight "b_proj.weight" {format = "bf16", shape = array<i64: 2, 32>}
// CHECK: %[[O0:.*]] = k3l.alloc {bytes = 16384 : i64, dtype = "bf16", elems = 8192 : i64, name = "linear_group"}
// CHECK-NEXT: %[[O1:.*]] = k3l.alloc {bytes = 128 : i64, dtype = "bf16", elems = 64 : i64, name = "linear_group"}
// CHECK-NEXT: %[[O2:.*]] = k3l.alloc {bytes = 4 : i64, dtype = "bf16", elems = 2 : i64, name = "linear_group"}
// CHECK-NEXT: k3l.launch "linear_multi"(%[[X]], %[[N]], %[[WQ]], %[[O0]], %[[WK]], %[[O1]], %[[WB]], %[[O2]])
// CHECK-SAME: arg_names = ["x", "normWeight", "w0", "out0", "w1", "out1", "w2", "out2"]
// CHECK-SAME: grid = array<i64: 528, 1, 1>
// CHECK-SAME: op = "k3.linear_group"
// CHECK-SAME: scalars = {count = 3 : i64, k = 32 : i64, n0 = 8192 : i64, n1 = 64 : i64, n2 = 2 : i64, normEps = 2.000000e-05 : f64}
// CHECK: %[[WU:.*]] = k3l.weight "up.weight"
// CHECK: %[[P0:.*]] = k3l.alloc {bytes = 4608 : i64, dtype = "bf16", elems = 2304 : i64, name = "linear_group"}
// CHECK-NEXT: %[[P1:.*]] = k3l.alloc {bytes = 4608 : i64, dtype = "bf16", elems = 2304 : i64, name = "linear_group"}
// CHECK-NEXT: k3l.launch "linear_multi"(%[[O2]], %[[WU]], %[[P0]], %[[WU]], %[[P1]])
// CHECK-SAME: arg_names = ["x", "w0", "out0", "w1", "out1"]
// CHECK-SAME: grid = array<i64: 576, 1, 1>
// CHECK-SAME: op = "k3.linear_group"
// CHECK-SAME: scalars = {count = 2 : i64, k = 2 : i64, n0 = 2304 : i64, n1 = 2304 : i64}
// CHECK-NEXT: k3l.alloc
// CHECK-NEXT: k3l.launch "add"(%[[P0]], %[[P1]],
// CHECK: k3l.logits
func.func @projections(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x32xbf16>
  %x = k3.embed %tok, %table : tensor<16x32xbf16> -> tensor<32xbf16>
  %n = k3.weight "input_layernorm.weight" : tensor<32xbf16>
  %wq = k3.weight "q_proj.weight" : tensor<8192x32xbf16>
  %wk = k3.weight "k_proj" : !k3.mxfp4<64x32>
  %wb = k3.weight "b_proj.weight" : tensor<2x32xbf16>
  %q, %k, %b = k3.linear_group %x, %wq, %wk, %wb norm(%n) {eps = 2.0e-05 : f64}
                 : (tensor<32xbf16>, tensor<8192x32xbf16>, !k3.mxfp4<64x32>, tensor<2x32xbf16>, tensor<32xbf16>)
                   -> (tensor<8192xbf16>, tensor<64xbf16>, tensor<2xbf16>)
  %wu = k3.weight "up.weight" : tensor<2304x2xbf16>
  %u0, %u1 = k3.linear_group %b, %wu, %wu
               : (tensor<2xbf16>, tensor<2304x2xbf16>, tensor<2304x2xbf16>) -> (tensor<2304xbf16>, tensor<2304xbf16>)
  %s = k3.add %u0, %u1 : tensor<2304xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x2304xbf16>
  %logits = k3.linear %s, %head : (tensor<2304xbf16>, tensor<16x2304xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// k3.moe_ffn: one moe_ffn launch (MoeFfnParams: router.* and experts.*).
// Both halves read the un-normalised h with the norm weight and its eps
// (3e-5); the router's outIds / outWeights are the buffers experts.ids /
// weights read; the experts also bind the shared expert (sharedInterDim
// 24) and h again as the residual. Three blocks per SM (396), one fewer
// than the other queue kernels.
// CHECK-LABEL: func.func @moe_ffn
// CHECK: %[[H:.*]] = k3l.alloc {{{.*}}name = "embed"}
// CHECK: %[[N:.*]] = k3l.weight "post_attention_layernorm.weight"
// CHECK: %[[IDS:.*]] = k3l.alloc {{{.*}}name = "router_ids"}
// CHECK: %[[WTS:.*]] = k3l.alloc {{{.*}}name = "router_weights"}
// CHECK: %[[OUT:.*]] = k3l.alloc {{{.*}}name = "moe_ffn"}
// CHECK: k3l.launch "moe_ffn"(%[[H]], %[[N]], %{{.*}}, %{{.*}}, %[[IDS]], %[[WTS]], %[[H]], %[[IDS]], %[[WTS]], %{{.*}}, %{{.*}}, %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %{{.*}}, %[[H]], %[[OUT]])
// CHECK-SAME: arg_names = ["router.h", "router.normWeight", "router.gate", "router.bias", "router.outIds", "router.outWeights", "experts.x", "experts.ids", "experts.weights", "experts.w1", "experts.w3", "experts.w2", "experts.normWeight", "experts.sharedW1", "experts.sharedW3", "experts.sharedW2", "experts.residual", "experts.out"]
// CHECK-SAME: grid = array<i64: 396, 1, 1>
// CHECK-SAME: op = "k3.moe_ffn", scalars = {experts.activation = 1 : i64, experts.dim = 8 : i64, experts.interDim = 16 : i64, experts.normEps = 3.000000e-05 : f64, experts.numExperts = 4 : i64, experts.sharedInterDim = 24 : i64, experts.topK = 2 : i64, router.dim = 8 : i64, router.normEps = 3.000000e-05 : f64, router.numExperts = 4 : i64, router.renormalize = 1 : i64, router.scaling = 2.446000e+00 : f64, router.topK = 2 : i64}
// CHECK-NOT: k3l.launch "router"
// CHECK-NOT: k3l.launch "moe_experts"
// CHECK-NOT: k3l.launch "rms_norm"
// CHECK-NOT: k3l.launch "add"
func.func @moe_ffn(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x8xbf16>
  %h = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %n = k3.weight "post_attention_layernorm.weight" : tensor<8xbf16>
  %gate = k3.weight "gate.weight" : tensor<4x8xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<4xf32>
  %e13 = k3.weight "experts.{e}.w1.weight" : tensor<4x16x8xbf16>
  %e2 = k3.weight "experts.{e}.w2.weight" : tensor<4x8x16xbf16>
  %s13 = k3.weight "shared_experts.gate_proj.weight" : tensor<24x8xbf16>
  %s2 = k3.weight "shared_experts.down_proj.weight" : tensor<8x24xbf16>
  %y = k3.moe_ffn %h norm(%n) router(%gate, %bias) experts(%e13, %e13, %e2) shared(%s13, %s13, %s2)
         {top_k = 2 : i64, renormalize = true, scaling = 2.446 : f64, eps = 3.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<24x8xbf16>, tensor<24x8xbf16>, tensor<8x24xbf16>) -> tensor<8xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x8xbf16>
  %logits = k3.linear %y, %head : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
