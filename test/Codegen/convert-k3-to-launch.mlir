// convert-k3-to-launch: weights, state and scratch become k3l pointers, each
// fine k3 op the launch of its kernel with the params fields bound by name.
// RUN: k3-opt %s --convert-k3-to-launch | FileCheck %s
// The lowered IR verifies and round-trips.
// RUN: k3-opt %s --convert-k3-to-launch | k3-opt | FileCheck %s

// CHECK-LABEL: func.func @decode_step
// The step keeps (token, pos) and returns nothing: the logits are a buffer.
// CHECK-SAME: (%{{.*}}: i32, %{{.*}}: index) {
// CHECK-NOT: k3.

// embed binds the token as an input.
// CHECK: %[[TABLE:.*]] = k3l.weight "embed.weight" {format = "bf16", shape = array<i64: 64, 32>} : !k3l.ptr
// CHECK: %[[X:.*]] = k3l.alloc {bytes = 64 : i64, dtype = "bf16", elems = 32 : i64, name = "embed"} : !k3l.ptr
// CHECK: k3l.launch "embed"(%[[TABLE]], %[[X]])
// CHECK-SAME: arg_names = ["table", "out"], arg_offsets = array<i64: 0, 0>
// CHECK-SAME: inputs = {token = "token"}, op = "k3.embed", scalars = {dim = 32 : i64, vocab = 64 : i64}

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
// CHECK-SAME: inputs = {pos = "pos"}
// CHECK-SAME: scalars = {eps = {{.*}}, kvLoraRank = 16 : i64, ropeDim = 8 : i64}
// CHECK: %[[KVB:.*]] = k3l.weight "kv_b_proj.weight"
// CHECK: %[[ATT:.*]] = k3l.alloc {bytes = 32 : i64, dtype = "bf16", elems = 16 : i64, name = "mla_attend"}
// CHECK: k3l.launch "mla_attend"(%[[C]], %[[KVB]], %[[CACHE]], %[[ATT]])
// CHECK-SAME: arg_names = ["q", "kvB", "cache", "out"]
// CHECK-SAME: grid = array<i64: 2, 1, 1>
// CHECK-SAME: inputs = {length = "length"}, op = "k3.mla_attend"
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
