// One case per verifier message of the k3 dialect.
// RUN: k3-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{kda_state heads must be positive, got 0}}
func.func @f(%s: !k3.kda_state<heads = 0, key_dim = 4, value_dim = 4>)

// -----
// expected-error @+1 {{conv_state channels must be positive, got -1}}
func.func @f(%s: !k3.conv_state<channels = -1, window = 3>)

// -----
// expected-error @+1 {{conv_state window must be >= 0, got -1}}
func.func @f(%s: !k3.conv_state<channels = 8, window = -1>)

// -----
// expected-error @+1 {{mla_cache max_seq must be positive, got 0}}
func.func @f(%s: !k3.mla_cache<max_seq = 0, width = 12>)

// -----
// expected-error @+1 {{attn_res_blocks hidden must be positive, got 0}}
func.func @f(%s: !k3.attn_res_blocks<max_blocks = 2, hidden = 0>)

// -----
// expected-error @+1 {{mxfp4 weight must be [out, in] or [experts, out, in], got rank 1}}
func.func @f(%s: !k3.mxfp4<32>)

// -----
// expected-error @+1 {{mxfp4 dimensions must be positive, got 0}}
func.func @f(%s: !k3.mxfp4<0x32>)

// -----
// expected-error @+1 {{mxfp4 input dimension must be a multiple of 32 (one E8M0 scale per 32 inputs), got 48}}
func.func @f(%s: !k3.mxfp4<8x48>)

// -----
// expected-error @+1 {{vector_weight dimensions must be positive, got 0}}
func.func @f(%s: !k3.vector_weight<0x1x4>)

// -----
// expected-error @+1 {{kda heads must be positive, got 0}}
func.func @f() attributes {c = #k3.kda<heads = 0, head_dim = 4, conv = 4>}

// -----
// expected-error @+1 {{kda conv width must be >= 1, got 0}}
func.func @f() attributes {c = #k3.kda<heads = 2, head_dim = 4, conv = 0>}

// -----
// expected-error @+1 {{kda lower_bound must be in [-5, 0), got -6}}
func.func @f() attributes {c = #k3.kda<heads = 2, head_dim = 4, conv = 4, lower_bound = -6.0>}

// -----
// expected-error @+1 {{mla q_lora must be >= 0 (0 = direct q_proj), got -1}}
func.func @f() attributes {c = #k3.mla<heads = 2, q_lora = -1, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}

// -----
// expected-error @+1 {{mla kv_lora must be positive, got 0}}
func.func @f() attributes {c = #k3.mla<heads = 2, q_lora = 0, kv_lora = 0, nope = 4, rope = 4, v_dim = 4>}

// -----
// expected-error @+1 {{moe experts must be positive, got 0}}
func.func @f() attributes {c = #k3.moe<experts = 0, top_k = 1, intermediate = 8, shared = 0, scaling = 1.0 : f64>}

// -----
// expected-error @+1 {{moe top_k (5) must not exceed experts (4)}}
func.func @f() attributes {c = #k3.moe<experts = 4, top_k = 5, intermediate = 8, shared = 0, scaling = 1.0 : f64>}

// -----
// expected-error @+1 {{moe shared must be >= 0, got -1}}
func.func @f() attributes {c = #k3.moe<experts = 4, top_k = 2, intermediate = 8, shared = -1, scaling = 1.0 : f64>}

// -----
// expected-error @+1 {{moe scaling must be positive}}
func.func @f() attributes {c = #k3.moe<experts = 4, top_k = 2, intermediate = 8, shared = 0, scaling = 0.0 : f64>}

// -----
func.func @f() {
  // expected-error @+1 {{'k3.weight' op expects a non-empty checkpoint tensor name}}
  %0 = k3.weight "" : tensor<8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{expects a rank-3 type for a name with '{e}' (experts stacked on dim 0) but got rank 2}}
  %0 = k3.weight "experts.{e}.w1" : tensor<8x8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{expects a vector_weight to name one tensor: stacked ('{e}') weights are matrices}}
  %0 = k3.weight "experts.{e}.norm.weight" : !k3.vector_weight<2x4x4>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{expects an mxfp4 weight to be named by its prefix (without '.weight')}}
  %0 = k3.weight "experts.0.w1.weight" : !k3.mxfp4<8x32>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3.state' op expects a non-empty slot name}}
  %0 = k3.state "" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  return
}

// -----
func.func @f(%t: i32, %table: tensor<16xbf16>) {
  // expected-error @+1 {{expects table of rank 2 [vocab, hidden] but got rank 1}}
  %0 = k3.embed %t, %table : tensor<16xbf16> -> tensor<8xbf16>
  return
}

// -----
func.func @f(%t: i32, %table: tensor<16x8xbf16>) {
  // expected-error @+1 {{expects result of shape [8] but got [16]}}
  %0 = k3.embed %t, %table : tensor<16x8xbf16> -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{expects weight of shape [8] but got [4]}}
  %0 = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<4xbf16> -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{expects eps to be positive and finite, got 0}}
  %0 = k3.rms_norm %x, %w {eps = 0.0 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<2x8xbf16>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{expects x to be a vector (rank 1) but got rank 2}}
  %0 = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<2x8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return
}

// -----
// KDA: heads x head_dim must match the projection width.
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 24, window = 3>,
             %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %m88: tensor<8x8xbf16>,
             %m168: tensor<16x8xbf16>, %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda' op expects q_proj of shape [8, 8] but got [16, 8]}}
  %a = k3.kda %n, %conv, %s weights(%m168, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<16x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 24, window = 3>,
             %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %m88: tensor<8x8xbf16>,
             %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<1xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{expects a_log to hold at least 2 values but it has 1}}
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<1xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 24, window = 3>,
             %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %m88: tensor<8x8xbf16>,
             %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{expects a full-rank output gate (gate(g_proj)) because config has full_rank_gate = true}}
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         low_rank_gate(%m48, %m84) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 24, window = 3>,
             %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %m88: tensor<8x8xbf16>,
             %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{expects a low-rank output gate (low_rank_gate(g_a_proj, g_b_proj)) because config has full_rank_gate = false}}
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 8, window = 3>,
             %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %m88: tensor<8x8xbf16>,
             %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{expects conv_state with channels = 3*heads*head_dim = 24 and window = conv-1 = 3 but got channels = 8, window = 3}}
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 8, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %conv: !k3.conv_state<channels = 24, window = 3>,
             %s: !k3.kda_state<heads = 1, key_dim = 8, value_dim = 8>, %m88: tensor<8x8xbf16>,
             %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>, %m84: tensor<8x4xbf16>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{expects state of 2 heads x 4 x 4 but got 1 x 8 x 8}}
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 1, key_dim = 8, value_dim = 8>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 12>, %m168: tensor<16x8xbf16>,
             %m128: tensor<12x8xbf16>, %w8: tensor<8xbf16>, %m88: tensor<8x8xbf16>) {
  // expected-error @+1 {{expects the q_lora path (q_lora(q_a_proj, q_a_norm, q_b_proj)) because config has q_lora = 8}}
  %m = k3.mla %n, %pos, %cache q(%m168) weights(%m128, %w8, %m168, %m88)
         {config = #k3.mla<heads = 2, q_lora = 8, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 12>, %m168: tensor<16x8xbf16>,
             %m128: tensor<12x8xbf16>, %w8: tensor<8xbf16>, %m88: tensor<8x8xbf16>) {
  // expected-error @+1 {{expects a direct q(q_proj) because config has q_lora = 0}}
  %m = k3.mla %n, %pos, %cache q_lora(%m88, %w8, %m168) weights(%m128, %w8, %m168, %m88)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<8x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 12>, %m168: tensor<16x8xbf16>,
             %m128: tensor<12x8xbf16>, %w8: tensor<8xbf16>, %m88: tensor<8x8xbf16>) {
  // expected-error @+1 {{expects a gate(g_proj) operand because config has output_gate = true}}
  %m = k3.mla %n, %pos, %cache q(%m168) weights(%m128, %w8, %m168, %m88)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 10>, %m168: tensor<16x8xbf16>,
             %m128: tensor<12x8xbf16>, %w8: tensor<8xbf16>, %m88: tensor<8x8xbf16>) {
  // expected-error @+1 {{'k3.mla' op expects cache width kv_lora + rope = 12 but got 10}}
  %m = k3.mla %n, %pos, %cache q(%m168) weights(%m128, %w8, %m168, %m88)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 10>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) {
  // expected-error @+1 {{expects situ_beta for the situ activation}}
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation situ>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32xbf16>, %w2: tensor<8x32xbf16>) {
  // expected-error @+1 {{expects w1 of rank 2 [intermediate, hidden] but got rank 1}}
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x16xbf16>) {
  // expected-error @+1 {{expects w2 of shape [8, 32] but got [8, 16]}}
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e1: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{expects shared experts because config has shared = 1}}
  %e = k3.moe %n router(%gate, %bias) experts(%e1, %e1, %e2)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 16, shared = 1, scaling = 1.0 : f64>, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%n: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %down: tensor<32xbf16>, %up: tensor<8x32xbf16>,
             %x1: !k3.mxfp4<4x32x32>) {
  // expected-error @+1 {{expects down of rank 2 [latent, hidden] but got rank 1}}
  %l = k3.latent_moe %n router(%gate, %bias) latent(%down, %up) experts(%x1, %x1, %x1)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 32, shared = 0, scaling = 1.0 : f64>,
          act = #k3<activation silu>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<32xbf16>, tensor<8x32xbf16>,
            !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%b: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>, %proj: tensor<8xbf16>) {
  // expected-error @+1 {{expects proj of shape [1, 8] but got [8]}}
  %h = k3.attn_res %b, %p, %p, %proj {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%b: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>) {
  // expected-error @+1 {{expects index in [0, 3) but got 3}}
  k3.attn_res_commit %b, %p {index = 3 : i64} : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{expects weight of rank 2 [vocab, hidden] but got rank 1}}
  %l = k3.lm_head %x, %w : tensor<8xbf16>, tensor<8xbf16> -> tensor<16xf32>
  return
}

// -----
func.func @f(%l: tensor<2x8xf32>) {
  // expected-error @+1 {{expects logits to be a vector (rank 1) but got rank 2}}
  %t = k3.argmax %l : tensor<2x8xf32>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{expects weight of rank 2 [out, in] but got rank 1}}
  %y = k3.linear %x, %w : (tensor<8xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<16x4xbf16>) {
  // expected-error @+1 {{expects x of shape [4] but got [8]}}
  %y = k3.linear %x, %w : (tensor<8xbf16>, tensor<16x4xbf16>) -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<16x8xbf16>, %n: tensor<8xbf16>) {
  // expected-error @+1 {{expects eps with a fused norm}}
  %y = k3.linear %x, %w norm(%n) : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<8xbf16>) -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<16x8xbf16>, %r: tensor<16xbf16>) {
  // expected-error @+1 {{expects a bf16 result with a residual epilogue}}
  %y = k3.linear %x, %w residual(%r) : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<16xf32>
  return
}

// -----
func.func @f(%u: tensor<8xbf16>, %w: tensor<4x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>) {
  // expected-error @+1 {{expects weight of shape [8, 1, W] but got [4, 1, 4]}}
  %c = k3.conv_step %u, %w, %cs {offset = 0 : i64} : (tensor<8xbf16>, tensor<4x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%u: tensor<8xbf16>, %w: tensor<8x1x3xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>) {
  // expected-error @+1 {{expects conv_state window = W-1 = 2 but got 3}}
  %c = k3.conv_step %u, %w, %cs {offset = 0 : i64} : (tensor<8xbf16>, tensor<8x1x3xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%u: tensor<8xbf16>, %w: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>) {
  // expected-error @+1 {{expects channels [20, 28) inside the conv_state's 24 channels}}
  %c = k3.conv_step %u, %w, %cs {offset = 20 : i64} : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{expects head_dim to divide 8 but got 3}}
  %y = k3.l2norm %x {head_dim = 3 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  return
}

// -----
func.func @f(%f: tensor<8xbf16>, %dt: tensor<8xf32>, %a: tensor<2xf32>) {
  // expected-error @+1 {{expects heads to divide 8 but got 3}}
  %g = k3.kda_gate %f, %dt, %a {heads = 3 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  return
}

// -----
func.func @f(%f: tensor<8xbf16>, %dt: tensor<8xf32>, %a: tensor<2xf32>) {
  // expected-error @+1 {{expects lower_bound in [-5, 0) but got 0}}
  %g = k3.kda_gate %f, %dt, %a {heads = 2 : i64, lower_bound = 0.0 : f64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  return
}

// -----
func.func @f(%q: tensor<8xf32>, %v: tensor<8xbf16>, %b: tensor<2xf32>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 8>) {
  // expected-error @+1 {{expects a square per-head state (key_dim = value_dim) but got 4 x 8}}
  %o = k3.kda_step %q, %q, %v, %q, %b, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 8>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%q: tensor<8xf32>, %v: tensor<8xbf16>, %b: tensor<4xf32>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) {
  // expected-error @+1 {{expects beta of shape [2] but got [4]}}
  %o = k3.kda_step %q, %q, %v, %q, %b, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<4xf32>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{expects head_dim to divide 8 but got 5}}
  %y = k3.gated_rms_norm %x, %x, %w {head_dim = 5 : i64, eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%kv: tensor<12xbf16>, %n: tensor<12xbf16>, %c: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index) {
  // expected-error @+1 {{expects norm (kv_lora = 12) narrower than the cache row (12)}}
  k3.mla_cache_append %kv, %n, %c, %pos {eps = 1.0e-06 : f64} : (tensor<12xbf16>, tensor<12xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  return
}

// -----
func.func @f(%q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>, %c: !k3.mla_cache<max_seq = 64, width = 16>, %pos: index) {
  // expected-error @+1 {{'k3.mla_attend' op expects cache width kv_lora + rope = 12 but got 16}}
  %o = k3.mla_attend %q, %kvb, %c, %pos {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 16>, index) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %g: tensor<8xbf16>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expects gate of rank 2 [experts, hidden] but got rank 1}}
  %i, %w = k3.router %x, %g, %b {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
             : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %g: tensor<4x8xbf16>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expects top_k in [1, 4] but got 5}}
  %i, %w = k3.router %x, %g, %b {top_k = 5 : i64, renormalize = true, scaling = 1.0 : f64}
             : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<5xi32>, tensor<5xf32>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %i: tensor<2xi32>, %w: tensor<2xf32>, %e: tensor<16x8xbf16>) {
  // expected-error @+1 {{expects stacked expert weights of rank 3 [experts, intermediate, latent] but got rank 2}}
  %m = k3.expert_mix %x, %i, %w, %e, %e, %e {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %i: tensor<6xi32>, %w: tensor<6xf32>, %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{expects at most 4 selected experts but got 6}}
  %m = k3.expert_mix %x, %i, %w, %e13, %e13, %e2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<6xi32>, tensor<6xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{expects beta to be positive and finite, got 0}}
  %y = k3.situ %x, %x {beta = 0.0 : f64} : tensor<8xbf16>
  return
}

// -----
func.func @f(%b: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>, %proj: tensor<1x8xbf16>) {
  // expected-error @+1 {{expects count in [0, 3] but got 4}}
  %h = k3.attn_res %b, %p, %p, %proj {count = 4 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
// Fused ops.
func.func @f(%x: tensor<8xbf16>, %b2: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
             %conv: !k3.conv_state<channels = 16, window = 3>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda_decode' op expects conv_state with channels = 3*heads*head_dim = 24 and window = conv-1 = 3 but got channels = 16, window = 3}}
  %y = k3.kda_decode %x, %x, %x, %x, %b2, %x, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<8xbf16>,
            !k3.conv_state<channels = 16, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %b2: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
             %conv: !k3.conv_state<channels = 24, window = 3>, %s: !k3.kda_state<heads = 4, key_dim = 2, value_dim = 2>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda_decode' op expects state of 2 heads x 4 x 4 but got 4 x 2 x 2}}
  %y = k3.kda_decode %x, %x, %x, %x, %b2, %x, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<8xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 4, key_dim = 2, value_dim = 2>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %cw: tensor<8x1x4xbf16>,
             %conv: !k3.conv_state<channels = 24, window = 3>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda_decode' op expects beta_logit of shape [2] but got [8]}}
  %y = k3.kda_decode %x, %x, %x, %x, %x, %x, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %r4: tensor<4xbf16>, %fb: tensor<8x3xbf16>, %b2: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
             %conv: !k3.conv_state<channels = 24, window = 3>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda_decode' op expects f_b of shape [8, 4] but got [8, 3]}}
  %y = k3.kda_decode %x, %x, %x, %r4, %b2, %x, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4) f_b(%fb)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>, tensor<2xbf16>, tensor<8xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>,
            tensor<8x3xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %r4: tensor<4xbf16>, %b2: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
             %conv: !k3.conv_state<channels = 24, window = 3>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
             %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.kda_decode' op expects gate of shape [8] but got [4]}}
  %y = k3.kda_decode %x, %x, %x, %x, %b2, %r4, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<4xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %kv: tensor<12xbf16>, %q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>,
             %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index) {
  // expected-error @+1 {{'k3.mla_decode' op expects a gate operand because config has output_gate = true}}
  %o = k3.mla_decode %kv, %q weights(%x, %kvb) cache(%cache, %pos)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %kv: tensor<12xbf16>, %q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>,
             %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index) {
  // expected-error @+1 {{'k3.mla_decode' op expects no gate operand because config has output_gate = false}}
  %o = k3.mla_decode %kv, %q weights(%x, %kvb) cache(%cache, %pos) gate(%x)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index, tensor<8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %kv: tensor<12xbf16>, %q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>,
             %cache: !k3.mla_cache<max_seq = 64, width = 16>, %pos: index) {
  // expected-error @+1 {{'k3.mla_decode' op expects cache width kv_lora + rope = 12 but got 16}}
  %o = k3.mla_decode %kv, %q weights(%x, %kvb) cache(%cache, %pos)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 16>, index) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>,
             %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index) {
  // expected-error @+1 {{'k3.mla_decode' op expects kv of shape [12] but got [8]}}
  %o = k3.mla_decode %x, %q weights(%x, %kvb) cache(%cache, %pos)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>, eps = 1.0e-06 : f64}
         : (tensor<8xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.routed_experts' op expects eps with a fused norm}}
  %r = k3.routed_experts %x, %x router(%gate, %bias) experts(%e13, %e13, %e2) norm(%x)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.routed_experts' op expects top_k in [1, 4] but got 5}}
  %r = k3.routed_experts %x, %x router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 5 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.routed_experts' op expects gate of rank 2 [experts, hidden] but got rank 1}}
  %r = k3.routed_experts %x, %x router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %w: tensor<16x8xbf16>) {
  // expected-error @+1 {{'k3.routed_experts' op expects stacked expert weights of rank 3 [experts, intermediate, latent] but got rank 2}}
  %r = k3.routed_experts %x, %x router(%gate, %bias) experts(%w, %w, %w)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<16x8xbf16>, tensor<16x8xbf16>,
            tensor<16x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %z: tensor<32xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
             %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.routed_experts' op expects w1 of shape [4, 16, 32] but got [4, 16, 8]}}
  %r = k3.routed_experts %x, %z router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<32xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %e13: tensor<4x32x8xbf16>, %w2: tensor<8x32xbf16>) {
  // expected-error @+1 {{'k3.gated_mlp' op expects unstacked weights of rank 2 but got w1 of rank 3 and w2 of rank 2}}
  %y = k3.gated_mlp %x, %e13, %e13, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<4x32x8xbf16>, tensor<4x32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) {
  // expected-error @+1 {{'k3.gated_mlp' op expects eps with a fused norm}}
  %y = k3.gated_mlp %x, %w1, %w1, %w2 norm(%x) {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.gated_mlp' op expects residual of shape [16] but got [8]}}
  %y = k3.gated_mlp %x, %w1, %w1, %w2 residual(%x) {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<16x32xbf16>, tensor<8xbf16>) -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) {
  // expected-error @+1 {{'k3.gated_mlp' op expects situ_beta for the situ activation}}
  %y = k3.gated_mlp %x, %w1, %w1, %w2 {act = #k3<activation situ>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<2x4xbf16>) {
  // expected-error @+1 {{'k3.probe' op expects a 1-D value but got rank 2}}
  k3.probe %x {name = "layers.0.out"} : tensor<2x4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.probe' op expects a non-empty name}}
  k3.probe %x {name = ""} : tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects 1 to 8 weights (one linear_multi launch) but got 9}}
  %y:9 = k3.linear_group %x, %w, %w, %w, %w, %w, %w, %w, %w, %w
           : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>,
              tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>)
             -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>,
                 tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects 1 to 8 weights (one linear_multi launch) but got 0}}
  "k3.linear_group"(%x) <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<8xbf16>) -> ()
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects one result per weight (2) but got 1}}
  %y = k3.linear_group %x, %w, %w : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<2x4xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects x to be a vector (rank 1) but got rank 2}}
  %y = k3.linear_group %x, %w : (tensor<2x4xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>, %v: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects weight 1 of rank 2 [out, in] but got rank 1}}
  %y:2 = k3.linear_group %x, %w, %v : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4xbf16>, tensor<8xbf16>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>, %w2: tensor<16x4xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects weight 1 of shape [16, 8] (k = len(x)) but got [16, 4]}}
  %y:2 = k3.linear_group %x, %w, %w2 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<16x4xbf16>) -> (tensor<4xbf16>, tensor<16xbf16>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>, %w2: tensor<16x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects result 1 of shape [16] but got [4]}}
  %y:2 = k3.linear_group %x, %w, %w2 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<16x8xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>)
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>, %n: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects norm of shape [8] but got [4]}}
  %y = k3.linear_group %x, %w norm(%n) {eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects eps with a fused norm}}
  %y = k3.linear_group %x, %w norm(%x) : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects eps to be positive and finite, got 0}}
  %y = k3.linear_group %x, %w norm(%x) {eps = 0.0 : f64} : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error @+1 {{'k3.linear_group' op expects no eps without a fused norm}}
  %y = k3.linear_group %x, %w {eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects top_k in [1, 4] but got 6}}
  %r = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 6 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects gate of rank 2 [experts, hidden] but got rank 1}}
  %r = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %w: tensor<16x8xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects stacked expert weights of rank 3 [experts, intermediate, hidden] but got rank 2}}
  %r = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%w, %w, %w)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<16x8xbf16>, tensor<16x8xbf16>,
            tensor<16x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>, %s: tensor<2x16x8xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects shared expert weights of rank 2 [intermediate, hidden] but got rank 3}}
  %r = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%e13, %e13, %e2) shared(%s, %s, %s)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<2x16x8xbf16>, tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
             %e2: tensor<4x8x16xbf16>, %s1: tensor<16x8xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects shared_w2 of shape [8, 16] but got [16, 8]}}
  %r = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%e13, %e13, %e2) shared(%s1, %s1, %s1)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>, %n: tensor<4xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
             %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{'k3.moe_ffn' op expects norm of shape [8] but got [4]}}
  %r = k3.moe_ffn %x norm(%n) router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<4xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{split rank must be in [0, 2), got 2}}
  %w = k3.weight "w" {split = #k3.split<axis = 0, rank = 2, ranks = 2>} : tensor<4x8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{split ranks must be >= 1, got 0}}
  %w = k3.weight "w" {split = #k3.split<axis = 0, rank = 0, ranks = 0>} : tensor<4x8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{split axis must be >= 0, got -1}}
  %w = k3.weight "w" {split = #k3.split<axis = -1, rank = 0, ranks = 2>} : tensor<4x8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3.weight' op expects split axis 2 inside the weight's rank 2}}
  %w = k3.weight "w" {split = #k3.split<axis = 2, rank = 0, ranks = 2>} : tensor<4x8xbf16>
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3.weight' op expects a stacked ('{e}') weight to be split inside each expert (axis 1 or 2), not over the experts}}
  %w = k3.weight "e.{e}.w1" {split = #k3.split<axis = 0, rank = 0, ranks = 2>} : tensor<4x8x8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.all_reduce' op expects ranks >= 2 but got 1}}
  %y = k3.all_reduce %x {ranks = 1 : i64} : tensor<8xbf16> -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<2x4xbf16>) {
  // expected-error @+1 {{'k3.all_reduce' op expects partial to be a vector (rank 1) but got rank 2}}
  %y = k3.all_reduce %x {ranks = 2 : i64} : tensor<2x4xbf16> -> tensor<8xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.all_reduce' op expects result of shape [8] but got [16]}}
  %y = k3.all_reduce %x {ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  return
}

// -----
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'k3.all_gather' op expects ranks >= 2 but got 0}}
  %y = k3.all_gather %x {ranks = 0 : i64} : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----
func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'k3.all_gather' op expects part to be a vector (rank 1) but got rank 2}}
  %y = k3.all_gather %x {ranks = 2 : i64} : tensor<2x4xf32> -> tensor<16xf32>
  return
}

// -----
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'k3.all_gather' op expects result of shape [16] but got [8]}}
  %y = k3.all_gather %x {ranks = 2 : i64} : tensor<8xf32> -> tensor<8xf32>
  return
}
