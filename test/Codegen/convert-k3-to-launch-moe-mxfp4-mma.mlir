// convert-k3-to-launch's moe-mxfp4-mma option: a k3.routed_experts of K3's
// latent shape (3584 -> 3072 -> 3584) with MXFP4 tables launches its expert
// mix as moe_experts_mxfp4 (the router and the latent norm are unchanged);
// so does a k3.expert_mix of MXFP4 tables that fit (dim and interDim
// multiples of 512 up to 4096). bf16 tables, MXFP4 tables of other sizes
// (interDim 544, dim 1056), and the option off (on by default) launch
// moe_experts. Both take the work queue's grid.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=ON
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch="moe-mxfp4-mma=false" | FileCheck %s --check-prefix=OFF
// The launch verifies and round-trips.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | k3-opt -split-input-file | FileCheck %s --check-prefix=ON

// Before:
//   %r = k3.routed_experts %h, %z router(%gate, %bias) experts(%e1, %e3, %e2) norm(%rn) {...}
// After (on):
//   k3l.launch "router"(...)
//   k3l.launch "moe_experts_mxfp4"(%z, %ids, %wts, %e1, %e3, %e2, %mix) {arg_names = ["x", "ids", "weights", "w1", "w3", "w2", "out"], block = array<i64: 256, 1, 1>, ...}
//   k3l.launch "rms_norm"(%mix, %rn, %out)
// ON-LABEL: func.func @k3_latent
// ON: k3l.launch "router"
// ON: k3l.launch "moe_experts_mxfp4"
// ON-SAME: arg_names = ["x", "ids", "weights", "w1", "w3", "w2", "out"]
// ON-SAME: block = array<i64: 256, 1, 1>
// ON-SAME: scalars = {activation = 0 : i64, beta1 = 4.000000e+00 : f64, beta2 = 2.500000e+01 : f64, dim = 3584 : i64, hasBeta2 = 1 : i64, interDim = 3072 : i64, numExperts = 4 : i64, topK = 2 : i64}
// ON: k3l.launch "rms_norm"
// OFF-LABEL: func.func @k3_latent
// OFF: k3l.launch "router"
// OFF: k3l.launch "moe_experts"(
// OFF: k3l.launch "rms_norm"
func.func @k3_latent() -> tensor<16xf32> {
  %h = k3.weight "h" : tensor<7168xbf16>
  %z = k3.weight "z" : tensor<3584xbf16>
  %gate = k3.weight "gate.weight" : tensor<4x7168xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<4xf32>
  %e1 = k3.weight "experts.{e}.w1" : !k3.mxfp4<4x3072x3584>
  %e3 = k3.weight "experts.{e}.w3" : !k3.mxfp4<4x3072x3584>
  %e2 = k3.weight "experts.{e}.w2" : !k3.mxfp4<4x3584x3072>
  %rn = k3.weight "routed_expert_norm.weight" : tensor<3584xbf16>
  %r = k3.routed_experts %h, %z router(%gate, %bias) experts(%e1, %e3, %e2) norm(%rn)
         {act = #k3<activation situ>, eps = 1.0e-05 : f64, renormalize = true, scaling = 1.0 : f64,
          situ_beta = 4.0 : f64, situ_linear_beta = 25.0 : f64, top_k = 2 : i64}
         : (tensor<7168xbf16>, tensor<3584xbf16>, tensor<4x7168xbf16>, tensor<4xf32>, !k3.mxfp4<4x3072x3584>,
            !k3.mxfp4<4x3072x3584>, !k3.mxfp4<4x3584x3072>, tensor<3584xbf16>) -> tensor<3584xbf16>
  %head = k3.weight "head" : tensor<16x3584xbf16>
  %logits = k3.linear %r, %head : (tensor<3584xbf16>, tensor<16x3584xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// ON-LABEL: func.func @mix_fits
// ON: k3l.launch "moe_experts_mxfp4"
// ON-SAME: scalars = {activation = 1 : i64, dim = 1024 : i64, interDim = 512 : i64, numExperts = 8 : i64, topK = 2 : i64}
// OFF-LABEL: func.func @mix_fits
// OFF: k3l.launch "moe_experts"(
func.func @mix_fits() -> tensor<16xf32> {
  %x = k3.weight "x" : tensor<1024xbf16>
  %gate = k3.weight "gate.weight" : tensor<8x1024xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<8xf32>
  %ids, %wts = k3.router %x, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<1024xbf16>, tensor<8x1024xbf16>, tensor<8xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %e1 = k3.weight "experts.{e}.w1" : !k3.mxfp4<8x512x1024>
  %e3 = k3.weight "experts.{e}.w3" : !k3.mxfp4<8x512x1024>
  %e2 = k3.weight "experts.{e}.w2" : !k3.mxfp4<8x1024x512>
  %m = k3.expert_mix %x, %ids, %wts, %e1, %e3, %e2 {act = #k3<activation silu>}
         : (tensor<1024xbf16>, tensor<2xi32>, tensor<2xf32>, !k3.mxfp4<8x512x1024>, !k3.mxfp4<8x512x1024>,
            !k3.mxfp4<8x1024x512>) -> tensor<1024xbf16>
  %head = k3.weight "head" : tensor<16x1024xbf16>
  %logits = k3.linear %m, %head : (tensor<1024xbf16>, tensor<16x1024xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// MXFP4 tables whose interDim (544) is not a multiple of 512.
// ON-LABEL: func.func @mix_not_fitting
// ON: k3l.launch "moe_experts"(
// ON-NOT: moe_experts_mxfp4
func.func @mix_not_fitting() -> tensor<16xf32> {
  %x = k3.weight "x" : tensor<1024xbf16>
  %gate = k3.weight "gate.weight" : tensor<8x1024xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<8xf32>
  %ids, %wts = k3.router %x, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<1024xbf16>, tensor<8x1024xbf16>, tensor<8xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %e1 = k3.weight "experts.{e}.w1" : !k3.mxfp4<8x544x1024>
  %e3 = k3.weight "experts.{e}.w3" : !k3.mxfp4<8x544x1024>
  %e2 = k3.weight "experts.{e}.w2" : !k3.mxfp4<8x1024x544>
  %m = k3.expert_mix %x, %ids, %wts, %e1, %e3, %e2 {act = #k3<activation silu>}
         : (tensor<1024xbf16>, tensor<2xi32>, tensor<2xf32>, !k3.mxfp4<8x544x1024>, !k3.mxfp4<8x544x1024>,
            !k3.mxfp4<8x1024x544>) -> tensor<1024xbf16>
  %head = k3.weight "head" : tensor<16x1024xbf16>
  %logits = k3.linear %m, %head : (tensor<1024xbf16>, tensor<16x1024xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// bf16 tables of a size that would fit.
// ON-LABEL: func.func @mix_bf16
// ON: k3l.launch "moe_experts"(
// ON-NOT: moe_experts_mxfp4
func.func @mix_bf16() -> tensor<16xf32> {
  %x = k3.weight "x" : tensor<1024xbf16>
  %gate = k3.weight "gate.weight" : tensor<8x1024xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<8xf32>
  %ids, %wts = k3.router %x, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<1024xbf16>, tensor<8x1024xbf16>, tensor<8xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %e1 = k3.weight "experts.{e}.w1" : tensor<8x512x1024xbf16>
  %e3 = k3.weight "experts.{e}.w3" : tensor<8x512x1024xbf16>
  %e2 = k3.weight "experts.{e}.w2" : tensor<8x1024x512xbf16>
  %m = k3.expert_mix %x, %ids, %wts, %e1, %e3, %e2 {act = #k3<activation silu>}
         : (tensor<1024xbf16>, tensor<2xi32>, tensor<2xf32>, tensor<8x512x1024xbf16>, tensor<8x512x1024xbf16>,
            tensor<8x1024x512xbf16>) -> tensor<1024xbf16>
  %head = k3.weight "head" : tensor<16x1024xbf16>
  %logits = k3.linear %m, %head : (tensor<1024xbf16>, tensor<16x1024xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// MXFP4 tables whose dim (1056: whole MXFP4 blocks) is not a multiple of 512.
// ON-LABEL: func.func @mix_dim_not_fitting
// ON: k3l.launch "moe_experts"(
// ON-NOT: moe_experts_mxfp4
func.func @mix_dim_not_fitting() -> tensor<16xf32> {
  %x = k3.weight "x" : tensor<1056xbf16>
  %gate = k3.weight "gate.weight" : tensor<8x1056xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<8xf32>
  %ids, %wts = k3.router %x, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<1056xbf16>, tensor<8x1056xbf16>, tensor<8xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  %e1 = k3.weight "experts.{e}.w1" : !k3.mxfp4<8x512x1056>
  %e3 = k3.weight "experts.{e}.w3" : !k3.mxfp4<8x512x1056>
  %e2 = k3.weight "experts.{e}.w2" : !k3.mxfp4<8x1056x512>
  %m = k3.expert_mix %x, %ids, %wts, %e1, %e3, %e2 {act = #k3<activation silu>}
         : (tensor<1056xbf16>, tensor<2xi32>, tensor<2xf32>, !k3.mxfp4<8x512x1056>, !k3.mxfp4<8x512x1056>,
            !k3.mxfp4<8x1056x512>) -> tensor<1056xbf16>
  %head = k3.weight "head" : tensor<16x1056xbf16>
  %logits = k3.linear %m, %head : (tensor<1056xbf16>, tensor<16x1056xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
