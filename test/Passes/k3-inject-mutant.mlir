// Test mutants: deliberately wrong decode steps (k3-inject-mutant). One
// two-layer step (KDA + dense MLP, KDA + MoE, an output AttnRes) broken in
// each of the three ways.
// RUN: k3-opt %s -k3-inject-mutant=kind=attn-res-skip | FileCheck %s --check-prefix=ARS
// RUN: k3-opt %s -k3-inject-mutant="kind=skip-layer layer=1" | FileCheck %s --check-prefix=SKIP1
// RUN: k3-opt %s -k3-inject-mutant="kind=skip-layer layer=0" | FileCheck %s --check-prefix=SKIP0
// RUN: k3-opt %s -k3-decompose-layers -k3-inject-mutant=kind=router-expert0 | FileCheck %s --check-prefix=ROUTER
// RUN: k3-opt %s -k3-decompose-layers -k3-fuse-moe -k3-inject-mutant=kind=router-expert0 | FileCheck %s --check-prefix=FUSED
// RUN: k3-opt %s -k3-decompose-layers | FileCheck %s --check-prefix=CLEAN

// The output AttnRes is gone; the final norm reads its p operand.
// ARS-LABEL: func.func @step
// ARS-NOT: k3.attn_res %
// ARS: %[[X2:.*]] = k3.add %{{.*}}, %[[E:.*]] : tensor<8xbf16>
// ARS-NEXT: k3.rms_norm %[[X2]], %{{.*}} {eps
// ARS-NOT: k3.attn_res %
// ARS: return

// Layer 1's KDA and MoE no longer reach the residual stream.
// SKIP1-LABEL: func.func @step
// SKIP1: %[[A0:.*]] = k3.kda
// SKIP1-NEXT: %[[H0:.*]] = k3.add %{{.*}}, %[[A0]]
// SKIP1: %[[D0:.*]] = k3.dense_mlp
// SKIP1-NEXT: %[[X1:.*]] = k3.add %[[H0]], %[[D0]]
// SKIP1: k3.kda
// SKIP1-NOT: k3.add
// SKIP1: k3.attn_res %{{.*}}, %[[X1]],
// SKIP1: return

// Layer 0 the same way: the embedding goes straight into layer 1.
// SKIP0-LABEL: func.func @step
// SKIP0: %[[X:.*]] = k3.embed
// SKIP0: k3.dense_mlp
// SKIP0: %[[A1:.*]] = k3.kda
// SKIP0-NEXT: k3.add %[[X]], %[[A1]]

// After decomposition every router is forced to expert 0.
// ROUTER-LABEL: func.func @step
// ROUTER: k3.router {{.*}}k3.mutant.force_expert = 0 : i64
// After the MoE fusion the fused op carries the mark instead.
// FUSED-LABEL: func.func @step
// FUSED-NOT: k3.router
// FUSED: k3.routed_experts {{.*}}k3.mutant.force_expert = 0 : i64
// CLEAN-LABEL: func.func @step
// CLEAN: k3.router
// CLEAN-NOT: k3.mutant.force_expert
func.func @step(%tok: i32, %table: tensor<16x8xbf16>, %w8: tensor<8xbf16>,
                %conv: !k3.conv_state<channels = 24, window = 3>,
                %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                %m88: tensor<8x8xbf16>, %cw: tensor<8x1x4xbf16>, %m48: tensor<4x8xbf16>,
                %m84: tensor<8x4xbf16>, %f8: tensor<8xf32>, %alog: tensor<2xf32>,
                %m28: tensor<2x8xbf16>, %w4: tensor<4xbf16>,
                %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>,
                %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                %e1: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>,
                %blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %proj: tensor<1x8xbf16>,
                %head: tensor<16x8xbf16>) -> tensor<16xf32> {
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %n0 = k3.rms_norm %x, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %a0 = k3.kda %n0, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16> loc("model.layers.0.self_attn.kda")
  %h0 = k3.add %x, %a0 : tensor<8xbf16>
  %m0 = k3.rms_norm %h0, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %d0 = k3.dense_mlp %m0, %w1, %w3, %w2 {act = #k3<activation situ>, situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
         loc("model.layers.0.mlp.dense_mlp")
  %x1 = k3.add %h0, %d0 : tensor<8xbf16>
  %n1 = k3.rms_norm %x1, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %a1 = k3.kda %n1, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16> loc("model.layers.1.self_attn.kda")
  %h1 = k3.add %x1, %a1 : tensor<8xbf16>
  %m1 = k3.rms_norm %h1, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %e = k3.moe %m1 router(%gate, %bias) experts(%e1, %e1, %e2)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 16, shared = 0, renormalize = true, scaling = 2.446 : f64>,
          act = #k3<activation silu>} : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>,
            tensor<4x16x8xbf16>, tensor<4x8x16xbf16>) -> tensor<8xbf16> loc("model.layers.1.mlp.moe")
  %x2 = k3.add %h1, %e : tensor<8xbf16>
  %f = k3.attn_res %blocks, %x2, %w8, %proj {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  %fn = k3.rms_norm %f, %w8 {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %logits = k3.lm_head %fn, %head : tensor<8xbf16>, tensor<16x8xbf16> -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
