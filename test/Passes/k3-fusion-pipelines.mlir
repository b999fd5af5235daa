// The fusion strategies end to end on a small decode step (KDA, dense MLP,
// MLA, latent MoE with shared experts, lm_head): which fused ops each one
// leaves. The per-pass tests check the rewrites themselves.
// RUN: k3-opt %s -k3-fusion-none | FileCheck %s --check-prefix=NONE
// RUN: k3-opt %s -k3-fusion-default | FileCheck %s --check-prefix=DEFAULT
// RUN: k3-opt %s -k3-fusion-max | FileCheck %s --check-prefix=MAX
// RUN: k3-opt %s -k3-fusion-default | FileCheck %s --check-prefix=DEFGROUP
// RUN: k3-opt %s -k3-fusion-max | FileCheck %s --check-prefix=MAXGROUP

// NONE-LABEL: func.func @step
// NONE-NOT: k3.kda_decode
// NONE-NOT: k3.mla_decode
// NONE-NOT: k3.routed_experts
// NONE-NOT: norm(
// NONE-NOT: residual(
// NONE-NOT: k3.linear_group
// NONE: return

// The fused ops keep the values of the coarse ones: the KDA gate's lower
// bound and eps, the q_a/kv_a layernorm eps 1e-6 of MLA, the latent MoE's
// router (top_k, renormalize, routed scaling 2.5), SiTU betas and latent
// norm eps (2e-5), and the dense MLP's SiTU betas.
// DEFAULT-LABEL: func.func @step
// DEFAULT: k3.kda_decode {{.*}} {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.000000e+00 : f64>, eps = 1.000000e-05 : f64}
// DEFAULT: k3.linear {{.*}} residual(
// DEFAULT: k3.situ {{.*}} {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64}
// DEFAULT: k3.mla_decode {{.*}} gate({{.*}}) {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>, eps = 9.9999999999999995E-7 : f64}
// DEFAULT: k3.routed_experts {{.*}} norm({{.*}}) {act = #k3<activation situ>, eps = 2.000000e-05 : f64, renormalize = true, scaling = 2.500000e+00 : f64, situ_beta = 4.000000e+00 : f64, top_k = 2 : i64}
// DEFAULT: k3.situ {{.*}} {beta = 4.000000e+00 : f64} :
// DEFAULT-NOT: k3.gated_mlp
// DEFAULT: k3.linear {{.*}} norm({{.*}}) {eps = 1.000000e-05 : f64} : {{.*}} -> tensor<16xf32>
// DEFAULT-NOT: k3.rms_norm
// DEFAULT: return

// default and max group the projections of one input that the other
// fusions leave (k3-fuse-projections, last): KDA's q/k/v/g (one weight
// here, merged by CSE), f_a and b with the input norm (f_b folds into
// kda_decode); MLA's q, kv_a and gate with the input norm.
// default also groups the dense MLP's w1/w3 (with their norm) and the latent
// MoE's down projection with the shared experts' w1/w3, which max fuses
// into gated_mlp instead. Residual and fp32 projections stay single.
// DEFGROUP-LABEL: func.func @step
// DEFGROUP: %[[KDA:.*]]:3 = k3.linear_group %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}} norm(%{{.*}}) {eps = 1.000000e-05 : f64}
// DEFGROUP: k3.kda_decode %[[KDA]]#0, %[[KDA]]#0, %[[KDA]]#0, %{{.*}}, %[[KDA]]#2, %[[KDA]]#0,
// DEFGROUP: %[[MLP:.*]]:2 = k3.linear_group %{{.*}} norm(%{{.*}}) {eps = 1.000000e-05 : f64}
// DEFGROUP-NEXT: k3.situ %[[MLP]]#0, %[[MLP]]#1
// DEFGROUP: %[[MLA:.*]]:3 = k3.linear_group %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}} norm(%{{.*}}) {eps = 1.000000e-05 : f64}
// DEFGROUP-NEXT: k3.mla_decode %[[MLA]]#1, %[[MLA]]#0 weights({{.*}}) gate(%[[MLA]]#2)
// DEFGROUP: %[[MOE:.*]]:3 = k3.linear_group %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}} :
// DEFGROUP-NEXT: k3.routed_experts %{{.*}}, %[[MOE]]#0 router(
// DEFGROUP: k3.situ %[[MOE]]#1, %[[MOE]]#2
// DEFGROUP-NOT: k3.linear_group
// DEFGROUP: return
// MAXGROUP-LABEL: func.func @step
// MAXGROUP: %[[KDA:.*]]:3 = k3.linear_group %{{.*}} norm(%{{.*}}) {eps = 1.000000e-05 : f64}
// MAXGROUP: k3.kda_decode %[[KDA]]#0,
// MAXGROUP-NOT: k3.linear_group
// MAXGROUP: k3.gated_mlp
// MAXGROUP: %[[MLA:.*]]:3 = k3.linear_group {{.*}} norm(
// MAXGROUP-NEXT: k3.mla_decode %[[MLA]]#1, %[[MLA]]#0 weights({{.*}}) gate(%[[MLA]]#2)
// MAXGROUP-NOT: k3.linear_group
// MAXGROUP: return

// MAX-LABEL: func.func @step
// MAX: k3.kda_decode
// MAX: k3.gated_mlp {{.*}} norm({{.*}}) residual({{.*}}) {act = #k3<activation situ>, eps = 1.000000e-05 : f64, situ_beta = 4.000000e+00 : f64, situ_linear_beta = 2.500000e+01 : f64}
// MAX: k3.mla_decode
// MAX: k3.routed_experts {{.*}} norm({{.*}}) {act = #k3<activation situ>, eps = 2.000000e-05 : f64, renormalize = true, scaling = 2.500000e+00 : f64, situ_beta = 4.000000e+00 : f64, top_k = 2 : i64}
// MAX: k3.gated_mlp {{.*}} residual({{.*}}) {act = #k3<activation situ>, situ_beta = 4.000000e+00 : f64} :
// MAX-NOT: k3.situ
// MAX-NOT: k3.swiglu
// MAX: return
func.func @step(%tok: i32, %pos: index, %table: tensor<16x8xbf16>, %w8: tensor<8xbf16>,
                %conv: !k3.conv_state<channels = 24, window = 3>,
                %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                %m88: tensor<8x8xbf16>, %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>,
                %m84: tensor<8x4xbf16>, %f8: tensor<8xf32>, %alog: tensor<2xf32>,
                %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>,
                %m168: tensor<16x8xbf16>, %m128: tensor<12x8xbf16>,
                %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>,
                %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                %x1: !k3.mxfp4<4x32x32>, %down: tensor<32x8xbf16>, %up: tensor<8x32xbf16>,
                %w32: tensor<32xbf16>, %head: tensor<16x8xbf16>) -> i32 {
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %n1 = k3.rms_norm %x, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %a = k3.kda %n1, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  %xa = k3.add %x, %a : tensor<8xbf16>
  %n2 = k3.rms_norm %xa, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %d = k3.dense_mlp %n2, %w1, %w3, %w2 {act = #k3<activation situ>, situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  %xd = k3.add %xa, %d : tensor<8xbf16>
  %n3 = k3.rms_norm %xd, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %m = k3.mla %n3, %pos, %cache q(%m168) weights(%m128, %w8, %m168, %m88) gate(%m88)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  %xm = k3.add %xd, %m : tensor<8xbf16>
  %n4 = k3.rms_norm %xm, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %l = k3.latent_moe %n4 router(%gate, %bias) latent(%down, %up) norm(%w32) experts(%x1, %x1, %x1) shared(%w1, %w3, %w2)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 32, shared = 1, scaling = 2.5 : f64>,
          act = #k3<activation situ>, situ_beta = 4.0 : f64, eps = 2.0e-05 : f64}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<32xbf16>,
            !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  %xl = k3.add %xm, %l : tensor<8xbf16>
  %n5 = k3.rms_norm %xl, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %logits = k3.lm_head %n5, %head : tensor<8xbf16>, tensor<16x8xbf16> -> tensor<16xf32>
  %next = k3.argmax %logits : tensor<16xf32>
  return %next : i32
}
