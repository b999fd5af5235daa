// RUN: k3-opt %s -split-input-file -k3-fuse-moe-ffn | FileCheck %s

// Kimi-Linear's MoE FFN after k3-fuse-moe and k3-fuse-residual: the norm, the
// routed experts, the shared expert (whose down projection adds the routed
// mix) and the residual add become one k3.moe_ffn with the norm's eps (2e-5
// here) and the experts' attributes.
// CHECK-LABEL: func.func @ffn
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[N:[^:]*]]: tensor<8xbf16>, %[[G:[^:]*]]: tensor<4x8xbf16>,
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32>, %[[E13:[^:]*]]: tensor<4x16x8xbf16>, %[[E2:[^:]*]]: tensor<4x8x16xbf16>,
// CHECK-SAME: %[[S1:[^:]*]]: tensor<16x8xbf16>, %[[S3:[^:]*]]: tensor<16x8xbf16>, %[[S2:[^:]*]]: tensor<8x16xbf16>)
// CHECK-NOT: k3.rms_norm
// CHECK-NOT: k3.routed_experts
// CHECK-NOT: k3.linear
// CHECK: %[[Y:.*]] = k3.moe_ffn %[[H]] norm(%[[N]]) router(%[[G]], %[[B]]) experts(%[[E13]], %[[E13]], %[[E2]]) shared(%[[S1]], %[[S3]], %[[S2]])
// CHECK-SAME: {act = #k3<activation silu>, eps = 2.000000e-05 : f64, renormalize = true, scaling = 2.500000e+00 : f64, top_k = 2 : i64}
// CHECK-NOT: k3.swiglu
// CHECK-NOT: k3.add
// CHECK: return %[[Y]]
func.func @ffn(%h: tensor<8xbf16>, %nw: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
               %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>, %s1: tensor<16x8xbf16>,
               %s3: tensor<16x8xbf16>, %s2: tensor<8x16xbf16>) -> tensor<8xbf16> {
  %n = k3.rms_norm %h, %nw {eps = 2.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r = k3.routed_experts %n, %n router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 2.5 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %g = k3.linear %n, %s1 : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %u = k3.linear %n, %s3 : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %a = k3.swiglu %g, %u : tensor<16xbf16>
  %t = k3.linear %a, %s2 residual(%r) : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %y = k3.add %t, %h : tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Without shared experts the residual add of the routed mix is the root.
// CHECK-LABEL: func.func @no_shared
// CHECK: %[[Y:.*]] = k3.moe_ffn %{{.*}} norm(%{{.*}}) router(%{{.*}}) experts(%{{.*}}) {act
// CHECK-NOT: shared(
// CHECK: return %[[Y]]
func.func @no_shared(%h: tensor<8xbf16>, %nw: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                     %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) -> tensor<8xbf16> {
  %n = k3.rms_norm %h, %nw {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r = k3.routed_experts %n, %n router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %y = k3.add %h, %r : tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the normed input is also returned (the fused op would not
// produce it).
// CHECK-LABEL: func.func @norm_escapes
// CHECK-NOT: k3.moe_ffn
// CHECK: k3.routed_experts
func.func @norm_escapes(%h: tensor<8xbf16>, %nw: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                        %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %n = k3.rms_norm %h, %nw {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r = k3.routed_experts %n, %n router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %y = k3.add %h, %r : tensor<8xbf16>
  return %y, %n : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: the residual is not the norm's input (a different stream).
// CHECK-LABEL: func.func @other_residual
// CHECK-NOT: k3.moe_ffn
// CHECK: k3.add
func.func @other_residual(%h: tensor<8xbf16>, %other: tensor<8xbf16>, %nw: tensor<8xbf16>, %gate: tensor<4x8xbf16>,
                          %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) -> tensor<8xbf16> {
  %n = k3.rms_norm %h, %nw {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r = k3.routed_experts %n, %n router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %y = k3.add %other, %r : tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: latent MoE (experts on z, not on the normed h).
// CHECK-LABEL: func.func @latent
// CHECK-NOT: k3.moe_ffn
// CHECK: k3.routed_experts
func.func @latent(%h: tensor<8xbf16>, %z: tensor<8xbf16>, %nw: tensor<8xbf16>, %gate: tensor<4x8xbf16>,
                  %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>) -> tensor<8xbf16> {
  %n = k3.rms_norm %h, %nw {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r = k3.routed_experts %n, %z router(%gate, %bias) experts(%e13, %e13, %e2)
         {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64, act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %y = k3.add %h, %r : tensor<8xbf16>
  return %y : tensor<8xbf16>
}
