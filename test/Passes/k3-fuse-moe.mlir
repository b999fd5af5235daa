// RUN: k3-opt %s -split-input-file -k3-fuse-moe | FileCheck %s

// Latent MoE: router on h, experts on z, then the latent norm of the mix.
// The fused op carries the router's top_k / renormalize / scaling, the
// experts' activation and both SiTU betas, and the norm's eps (2e-5 here).
// CHECK-LABEL: func.func @latent
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[Z:[^:]*]]: tensor<32xbf16>, %[[G:[^:]*]]: tensor<4x8xbf16>,
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32>, %[[W:[^:]*]]: !k3.mxfp4<4x32x32>, %[[N:[^:]*]]: tensor<32xbf16>)
// CHECK-NOT: k3.router
// CHECK-NOT: k3.expert_mix
// CHECK-NOT: k3.rms_norm
// CHECK: %[[R:.*]] = k3.routed_experts %[[H]], %[[Z]] router(%[[G]], %[[B]]) experts(%[[W]], %[[W]], %[[W]]) norm(%[[N]])
// CHECK-SAME: {act = #k3<activation situ>, eps = 2.000000e-05 : f64, renormalize = true, scaling = 2.500000e+00 : f64,
// CHECK-SAME: situ_beta = 4.000000e+00 : f64, situ_linear_beta = 2.500000e+01 : f64, top_k = 2 : i64}
// CHECK-NOT: k3.router
// CHECK-NOT: k3.expert_mix
// CHECK-NOT: k3.rms_norm
// CHECK: return %[[R]]
func.func @latent(%h: tensor<8xbf16>, %z: tensor<32xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>,
                  %w: !k3.mxfp4<4x32x32>, %n: tensor<32xbf16>) -> tensor<32xbf16> {
  %ids, %wts = k3.router %h, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 2.5 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %mix = k3.expert_mix %z, %ids, %wts, %w, %w, %w {act = #k3<activation situ>, situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64}
           : (tensor<32xbf16>, tensor<2xi32>, tensor<2xf32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>,
              !k3.mxfp4<4x32x32>) -> tensor<32xbf16>
  %r = k3.rms_norm %mix, %n {eps = 2.0e-05 : f64} : tensor<32xbf16>, tensor<32xbf16> -> tensor<32xbf16>
  return %r : tensor<32xbf16>
}

// -----

// Plain MoE (experts on h), no norm, no renormalisation, top 3 of 4 with a
// routed scaling of 0.75; SwiGLU experts carry no betas.
// CHECK-LABEL: func.func @plain
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>
// CHECK: %[[R:.*]] = k3.routed_experts %[[H]], %[[H]] router
// CHECK-NOT: norm(
// CHECK-SAME: {act = #k3<activation silu>, renormalize = false, scaling = 7.500000e-01 : f64, top_k = 3 : i64}
// CHECK-NOT: k3.router
// CHECK-NOT: k3.expert_mix
// CHECK: return %[[R]]
func.func @plain(%h: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
                 %e2: tensor<4x8x16xbf16>) -> tensor<8xbf16> {
  %ids, %wts = k3.router %h, %gate, %bias {top_k = 3 : i64, renormalize = false, scaling = 0.75 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<3xi32>, tensor<3xf32>)
  %mix = k3.expert_mix %h, %ids, %wts, %e13, %e13, %e2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<3xi32>, tensor<3xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
              tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return %mix : tensor<8xbf16>
}

// -----

// The norm is not folded when the un-normalised mix has another user; the
// router and mix still fuse.
// CHECK-LABEL: func.func @mix_escapes
// CHECK: %[[R:.*]] = k3.routed_experts
// CHECK-NOT: norm(
// CHECK-NOT: eps
// CHECK-SAME: -> tensor<8xbf16>
// CHECK: %[[N:.*]] = k3.rms_norm %[[R]], %{{.*}} {eps = 1.000000e-05 : f64}
// CHECK: return %[[N]], %[[R]]
func.func @mix_escapes(%h: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
                       %e2: tensor<4x8x16xbf16>, %n: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %ids, %wts = k3.router %h, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %mix = k3.expert_mix %h, %ids, %wts, %e13, %e13, %e2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
              tensor<4x8x16xbf16>) -> tensor<8xbf16>
  %r = k3.rms_norm %mix, %n {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %r, %mix : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: the routing weights are also used elsewhere.
// CHECK-LABEL: func.func @weights_escape
// CHECK-NOT: k3.routed_experts
// CHECK: k3.router
// CHECK: k3.expert_mix
func.func @weights_escape(%h: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e13: tensor<4x16x8xbf16>,
                          %e2: tensor<4x8x16xbf16>) -> (tensor<8xbf16>, tensor<2xf32>) {
  %ids, %wts = k3.router %h, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %mix = k3.expert_mix %h, %ids, %wts, %e13, %e13, %e2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
              tensor<4x8x16xbf16>) -> tensor<8xbf16>
  return %mix, %wts : tensor<8xbf16>, tensor<2xf32>
}
