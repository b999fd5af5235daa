// Every k3 op and type round-trips through the custom and the generic form.
// RUN: k3-opt %s | k3-opt | FileCheck %s
// RUN: k3-opt %s --mlir-print-op-generic | k3-opt | FileCheck %s

// CHECK-LABEL: func.func @leaves
func.func @leaves() {
  // CHECK: k3.weight "model.embed_tokens.weight" : tensor<16x8xbf16>
  %0 = k3.weight "model.embed_tokens.weight" : tensor<16x8xbf16>
  // CHECK: k3.weight "model.layers.1.block_sparse_moe.experts.{e}.w1" : !k3.mxfp4<4x32x32>
  %1 = k3.weight "model.layers.1.block_sparse_moe.experts.{e}.w1" : !k3.mxfp4<4x32x32>
  // CHECK: k3.weight "model.layers.0.self_attn.o_proj.weight" {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<16x4xbf16>
  %s = k3.weight "model.layers.0.self_attn.o_proj.weight" {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<16x4xbf16>
  // CHECK: k3.weight "model.layers.0.self_attn.A_log" : tensor<1x1x2x1xf32>
  %2 = k3.weight "model.layers.0.self_attn.A_log" : tensor<1x1x2x1xf32>
  // CHECK: k3.weight "model.layers.0.self_attn.q_conv1d.weight" : !k3.vector_weight<8x1x4>
  %7 = k3.weight "model.layers.0.self_attn.q_conv1d.weight" : !k3.vector_weight<8x1x4>
  // CHECK: k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  %3 = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  // CHECK: k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 3>
  %4 = k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 3>
  // CHECK: k3.state "layers.3.mla" : !k3.mla_cache<max_seq = 64, width = 12>
  %5 = k3.state "layers.3.mla" : !k3.mla_cache<max_seq = 64, width = 12>
  // CHECK: k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>
  %6 = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>
  return
}

// CHECK-LABEL: func.func @coarse
func.func @coarse(%tok: i32, %pos: index, %table: tensor<16x8xbf16>, %w8: tensor<8xbf16>,
                  %conv: !k3.conv_state<channels = 24, window = 3>,
                  %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                  %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                  %blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>,
                  %m88: tensor<8x8xbf16>, %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>,
                  %m84: tensor<8x4xbf16>, %f8: tensor<8xf32>, %alog: tensor<128xf32>,
                  %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>,
                  %m168: tensor<16x8xbf16>, %m128: tensor<12x8xbf16>, %proj: tensor<1x8xbf16>,
                  %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>,
                  %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                  %e1: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>,
                  %x1: !k3.mxfp4<4x32x32>, %lat_down: tensor<32x8xbf16>, %lat_up: tensor<8x32xbf16>,
                  %w32: tensor<32xbf16>, %head: tensor<16x8xbf16>, %m816: tensor<8x16xbf16>) -> i32 {
  // CHECK: k3.embed
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  // CHECK: k3.rms_norm
  %n = k3.rms_norm %x, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  // CHECK: k3.kda %{{.*}} weights(
  // CHECK-SAME: gate(
  // CHECK-SAME: #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.000000e+00 : f64>
  %a = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<128xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.kda %{{.*}} low_rank_gate(
  %a2 = k3.kda %n, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         low_rank_gate(%m48, %m84) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<128xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  // CHECK: k3.mla %{{.*}} q_lora(
  // CHECK-SAME: gate(
  %m = k3.mla %n, %pos, %cache q_lora(%m88, %w8, %m168) weights(%m128, %w8, %m168, %m88) gate(%m88)
         {config = #k3.mla<heads = 2, q_lora = 8, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<8x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.mla %{{.*}} q(
  %m2 = k3.mla %n, %pos, %cache q(%m168) weights(%m128, %w8, %m168, %m88)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.dense_mlp
  %d = k3.dense_mlp %n, %w1, %w1, %w2 {act = #k3<activation situ>, situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  // CHECK: k3.moe %{{.*}} router({{.*}}) experts({{.*}}) shared(
  %e = k3.moe %n router(%gate, %bias) experts(%e1, %e1, %e2) shared(%m168, %m168, %m816)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 16, shared = 1, renormalize = true, scaling = 2.446 : f64>,
          act = #k3<activation silu>} : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>,
            tensor<4x16x8xbf16>, tensor<4x8x16xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  // CHECK: k3.latent_moe %{{.*}} latent({{.*}}) norm({{.*}}) experts(
  %l = k3.latent_moe %n router(%gate, %bias) latent(%lat_down, %lat_up) norm(%w32) experts(%x1, %x1, %x1)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 32, shared = 0, scaling = 1.0 : f64>,
          act = #k3<activation situ>, situ_beta = 4.0 : f64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<32xbf16>,
            !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>) -> tensor<8xbf16>
  // CHECK: k3.probe %{{.*}} {name = "layers.0.out"} : tensor<8xbf16>
  k3.probe %x {name = "layers.0.out"} : tensor<8xbf16>
  // CHECK: k3.attn_res_commit
  k3.attn_res_commit %blocks, %x {index = 0 : i64} : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>
  // CHECK: k3.attn_res
  %h = k3.attn_res %blocks, %a, %w8, %proj {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.attn_res {{.*}} then_norm(
  %h2 = k3.attn_res %blocks, %a, %w8, %proj then_norm(%w8) {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.lm_head
  %logits = k3.lm_head %h, %head : tensor<8xbf16>, tensor<16x8xbf16> -> tensor<16xf32>
  // CHECK: k3.argmax
  %next = k3.argmax %logits : tensor<16xf32>
  return %next : i32
}

// CHECK-LABEL: func.func @fine
func.func @fine(%x: tensor<8xbf16>, %w: tensor<16x8xbf16>, %mx: !k3.mxfp4<16x32>, %x32: tensor<32xbf16>,
                %nw: tensor<8xbf16>, %r: tensor<16xbf16>, %cw: tensor<8x1x4xbf16>,
                %conv: !k3.conv_state<channels = 24, window = 3>, %f8: tensor<8xf32>, %alog: tensor<2xf32>,
                %b2: tensor<2xbf16>, %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>, %w4: tensor<4xbf16>,
                %kv: tensor<12xbf16>, %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index,
                %q: tensor<16xbf16>, %kvb: tensor<16x8xbf16>, %g8: tensor<8xbf16>,
                %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) {
  // CHECK: k3.linear %{{.*}}, %{{.*}} :
  %y = k3.linear %x, %w : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  // CHECK: k3.linear %{{.*}} norm({{.*}}) residual(
  %y2 = k3.linear %x, %w norm(%nw) residual(%r) {eps = 1.0e-05 : f64}
          : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<8xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  // CHECK: k3.linear {{.*}} -> tensor<16xf32>
  %y3 = k3.linear %x32, %mx : (tensor<32xbf16>, !k3.mxfp4<16x32>) -> tensor<16xf32>
  // CHECK: k3.add
  %sum = k3.add %y, %y2 : tensor<16xbf16>
  // CHECK: k3.mul_sigmoid
  %ms = k3.mul_sigmoid %y, %y2 : tensor<16xbf16>
  // CHECK: k3.conv_step
  %c = k3.conv_step %x, %cw, %conv {offset = 8 : i64}
         : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  // CHECK: k3.l2norm
  %qn = k3.l2norm %c {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 5.000000e-01 : f64} : tensor<8xbf16> -> tensor<8xf32>
  // CHECK: k3.kda_gate
  %g = k3.kda_gate %x, %f8, %alog {heads = 2 : i64, lower_bound = -5.0 : f64}
         : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  // CHECK: k3.sigmoid
  %beta = k3.sigmoid %b2 : tensor<2xbf16> -> tensor<2xf32>
  // CHECK: k3.kda_step
  %o = k3.kda_step %qn, %qn, %c, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  // CHECK: k3.gated_rms_norm
  %gn = k3.gated_rms_norm %o, %x, %w4 {head_dim = 4 : i64, eps = 1.0e-05 : f64}
          : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  // Conv filters and o_norm stored bf16 or f32 (chosen when the plan is bound).
  // CHECK: k3.conv_step {{.*}} : (tensor<8xbf16>, !k3.vector_weight<8x1x4>,
  %vcw = k3.weight "q_conv1d.weight" : !k3.vector_weight<8x1x4>
  %vc = k3.conv_step %x, %vcw, %conv {offset = 8 : i64}
          : (tensor<8xbf16>, !k3.vector_weight<8x1x4>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  // CHECK: k3.gated_rms_norm {{.*}} : (tensor<8xbf16>, tensor<8xbf16>, !k3.vector_weight<4>)
  %vw4 = k3.weight "o_norm.weight" : !k3.vector_weight<4>
  %vgn = k3.gated_rms_norm %o, %x, %vw4 {head_dim = 4 : i64, eps = 1.0e-05 : f64}
          : (tensor<8xbf16>, tensor<8xbf16>, !k3.vector_weight<4>) -> tensor<8xbf16>
  // CHECK: k3.mla_cache_append
  k3.mla_cache_append %kv, %nw, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  // CHECK: k3.mla_attend {{.*}} gate(
  %att = k3.mla_attend %q, %kvb, %cache, %pos gate(%g8)
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
           : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index, tensor<8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.router
  %ids, %wts = k3.router %x, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  // CHECK: k3.expert_mix
  %mix = k3.expert_mix %x, %ids, %wts, %e13, %e13, %e2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>) -> tensor<8xbf16>
  // CHECK: k3.situ
  %si = k3.situ %x, %x {beta = 4.0 : f64, linear_beta = 25.0 : f64} : tensor<8xbf16>
  // CHECK: k3.swiglu
  %sw = k3.swiglu %x, %x : tensor<8xbf16>
  return
}

// CHECK-LABEL: func.func @fused
func.func @fused(%x: tensor<8xbf16>, %b2: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
                 %conv: !k3.conv_state<channels = 24, window = 3>,
                 %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                 %f8: tensor<8xf32>, %alog: tensor<2xf32>, %w4: tensor<4xbf16>,
                 %q: tensor<16xbf16>, %kva: tensor<12x8xbf16>, %kvb: tensor<16x8xbf16>,
                 %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index,
                 %z: tensor<32xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                 %x1: !k3.mxfp4<4x32x32>, %w32: tensor<32xbf16>,
                 %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>,
                 %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>,
                 %r4: tensor<4xbf16>, %lr: tensor<8x4xbf16>, %kv12: tensor<12xbf16>) {
  // CHECK: k3.kda_decode %{{.*}} weights(
  // CHECK-SAME: #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.000000e+00 : f64>
  %y = k3.kda_decode %x, %x, %x, %x, %b2, %x, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<8xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>) -> tensor<8xbf16>
  // CHECK: k3.kda_decode %{{.*}} weights({{.*}}) f_b(%{{.*}}) g_b(%{{.*}}) {config
  %y2 = k3.kda_decode %x, %x, %x, %r4, %b2, %r4, %conv, %s weights(%cw, %cw, %cw, %f8, %alog, %w4) f_b(%lr) g_b(%lr)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>, tensor<2xbf16>, tensor<4xbf16>,
            !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<4xbf16>,
            tensor<8x4xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  // CHECK: k3.mla_decode %{{.*}} weights({{.*}}) cache({{.*}}) gate(
  %o = k3.mla_decode %kv12, %q weights(%x, %kvb) cache(%cache, %pos) gate(%x)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index, tensor<8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.mla_decode %{{.*}} cache({{.*}}) {config
  %o2 = k3.mla_decode %kv12, %q weights(%x, %kvb) cache(%cache, %pos)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>, eps = 1.0e-06 : f64}
         : (tensor<12xbf16>, tensor<16xbf16>, tensor<8xbf16>, tensor<16x8xbf16>,
            !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  // CHECK: k3.routed_experts %{{.*}} router({{.*}}) experts({{.*}}) norm(
  %r = k3.routed_experts %x, %z router(%gate, %bias) experts(%x1, %x1, %x1) norm(%w32)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation situ>, situ_beta = 4.0 : f64,
          eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<32xbf16>, tensor<4x8xbf16>, tensor<4xf32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>,
            !k3.mxfp4<4x32x32>, tensor<32xbf16>) -> tensor<32xbf16>
  // CHECK: k3.moe_ffn %{{.*}} norm({{.*}}) router({{.*}}) experts({{.*}}) {
  %f0 = k3.moe_ffn %x norm(%x) router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 2.5 : f64, eps = 1.0e-05 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  // CHECK: k3.routed_experts %{{.*}} experts({{.*}}) {
  %r2 = k3.routed_experts %x, %x router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = false, scaling = 2.5 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  // CHECK: k3.gated_mlp %{{.*}} norm({{.*}}) residual(
  %m = k3.gated_mlp %x, %w1, %w1, %w2 norm(%x) residual(%x)
         {act = #k3<activation situ>, situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  // CHECK: k3.gated_mlp %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {act = #k3<activation silu>}
  %m2 = k3.gated_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return
}

// k3.linear_group: with a fused norm (mixed bf16 / MXFP4 weights of one k),
// and without one.
// CHECK-LABEL: func.func @linear_group
// CHECK-SAME: (%[[X:[^:]*]]: tensor<32xbf16>, %[[W:[^:]*]]: tensor<16x32xbf16>, %[[MX:[^:]*]]: !k3.mxfp4<8x32>, %[[N:[^:]*]]: tensor<32xbf16>)
func.func @linear_group(%x: tensor<32xbf16>, %w: tensor<16x32xbf16>, %mx: !k3.mxfp4<8x32>, %n: tensor<32xbf16>) {
  // CHECK: %{{.*}}:3 = k3.linear_group %[[X]], %[[W]], %[[MX]], %[[W]] norm(%[[N]]) {eps = 1.000000e-05 : f64}
  // CHECK-SAME: : (tensor<32xbf16>, tensor<16x32xbf16>, !k3.mxfp4<8x32>, tensor<16x32xbf16>, tensor<32xbf16>)
  // CHECK-SAME: -> (tensor<16xbf16>, tensor<8xbf16>, tensor<16xbf16>)
  %a:3 = k3.linear_group %x, %w, %mx, %w norm(%n) {eps = 1.0e-05 : f64}
           : (tensor<32xbf16>, tensor<16x32xbf16>, !k3.mxfp4<8x32>, tensor<16x32xbf16>, tensor<32xbf16>)
             -> (tensor<16xbf16>, tensor<8xbf16>, tensor<16xbf16>)
  // CHECK: k3.linear_group %[[X]], %[[W]] : (tensor<32xbf16>, tensor<16x32xbf16>) -> tensor<16xbf16>
  %b = k3.linear_group %x, %w : (tensor<32xbf16>, tensor<16x32xbf16>) -> tensor<16xbf16>
  return
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%p: tensor<8xbf16>, %l: tensor<4xf32>) -> (tensor<8xbf16>, tensor<8xf32>) {
  // CHECK: k3.all_reduce %{{.*}} {ranks = 2 : i64} : tensor<8xbf16> -> tensor<8xbf16>
  %y = k3.all_reduce %p {ranks = 2 : i64} : tensor<8xbf16> -> tensor<8xbf16>
  // CHECK: k3.all_gather %{{.*}} {ranks = 2 : i64} : tensor<4xf32> -> tensor<8xf32>
  %g = k3.all_gather %l {ranks = 2 : i64} : tensor<4xf32> -> tensor<8xf32>
  return %y, %g : tensor<8xbf16>, tensor<8xf32>
}
