// RUN: k3-opt %s -split-input-file -k3-fuse-mlp | FileCheck %s

// A SiTU gated MLP with a folded input norm and a residual epilogue: the
// fused op keeps both betas and the input norm's eps (1e-6 here, so that a
// default 1e-5 would show).
// CHECK-LABEL: func.func @situ_mlp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[N:[^:]*]]: tensor<8xbf16>, %[[W1:[^:]*]]: tensor<32x8xbf16>,
// CHECK-SAME: %[[W3:[^:]*]]: tensor<32x8xbf16>, %[[W2:[^:]*]]: tensor<8x32xbf16>, %[[R:[^:]*]]: tensor<8xbf16>)
// CHECK-NOT: k3.linear
// CHECK-NOT: k3.situ
// CHECK: %[[Y:.*]] = k3.gated_mlp %[[X]], %[[W1]], %[[W3]], %[[W2]] norm(%[[N]]) residual(%[[R]])
// CHECK-SAME: {act = #k3<activation situ>, eps = 9.9999999999999995E-7 : f64, situ_beta = 4.000000e+00 : f64, situ_linear_beta = 2.500000e+01 : f64}
// CHECK-NOT: k3.linear
// CHECK-NOT: k3.situ
// CHECK: return %[[Y]]
func.func @situ_mlp(%x: tensor<8xbf16>, %n: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                    %w2: tensor<8x32xbf16>, %r: tensor<8xbf16>) -> tensor<8xbf16> {
  %g = k3.linear %x, %w1 norm(%n) {eps = 1.0e-06 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %u = k3.linear %x, %w3 norm(%n) {eps = 1.0e-06 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %a = k3.situ %g, %u {beta = 4.0 : f64, linear_beta = 25.0 : f64} : tensor<32xbf16>
  %y = k3.linear %a, %w2 residual(%r) : (tensor<32xbf16>, tensor<8x32xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// SwiGLU without norm or residual; w1 is the gate branch even when the up
// projection comes first.
// CHECK-LABEL: func.func @swiglu_mlp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W1:[^:]*]]: tensor<32x8xbf16>, %[[W3:[^:]*]]: tensor<32x8xbf16>, %[[W2:[^:]*]]: tensor<8x32xbf16>)
// CHECK-NOT: k3.linear
// CHECK-NOT: k3.swiglu
// CHECK: %[[Y:.*]] = k3.gated_mlp %[[X]], %[[W1]], %[[W3]], %[[W2]] {act = #k3<activation silu>} :
// CHECK-NOT: k3.linear
// CHECK-NOT: k3.swiglu
// CHECK: return %[[Y]]
func.func @swiglu_mlp(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                      %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %u = k3.linear %x, %w3 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %g = k3.linear %x, %w1 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %a = k3.swiglu %g, %u : tensor<32xbf16>
  %y = k3.linear %a, %w2 : (tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the gate and up projections normalise with different weights.
// CHECK-LABEL: func.func @different_norms
// CHECK-NOT: k3.gated_mlp
// CHECK: k3.swiglu
func.func @different_norms(%x: tensor<8xbf16>, %n1: tensor<8xbf16>, %n3: tensor<8xbf16>, %w1: tensor<32x8xbf16>,
                           %w3: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %g = k3.linear %x, %w1 norm(%n1) {eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %u = k3.linear %x, %w3 norm(%n3) {eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %a = k3.swiglu %g, %u : tensor<32xbf16>
  %y = k3.linear %a, %w2 : (tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the activation output is also returned.
// CHECK-LABEL: func.func @activation_escapes
// CHECK-NOT: k3.gated_mlp
// CHECK: %[[A:.*]] = k3.swiglu
// CHECK: k3.linear %[[A]]
func.func @activation_escapes(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                              %w2: tensor<8x32xbf16>) -> (tensor<8xbf16>, tensor<32xbf16>) {
  %g = k3.linear %x, %w1 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %u = k3.linear %x, %w3 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %a = k3.swiglu %g, %u : tensor<32xbf16>
  %y = k3.linear %a, %w2 : (tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y, %a : tensor<8xbf16>, tensor<32xbf16>
}

// -----

// SiTU without the linear branch: only situ_beta (3.0) carries over.
// CHECK-LABEL: func.func @situ_one_beta
// CHECK: k3.gated_mlp {{.*}} {act = #k3<activation situ>, situ_beta = 3.000000e+00 : f64} :
// CHECK-NOT: k3.situ
func.func @situ_one_beta(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                         %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %g = k3.linear %x, %w1 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %u = k3.linear %x, %w3 : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %a = k3.situ %g, %u {beta = 3.0 : f64} : tensor<32xbf16>
  %y = k3.linear %a, %w2 : (tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the gate and up projections share the norm weight but not its
// eps (the kernel normalises once).
// CHECK-LABEL: func.func @different_eps
// CHECK-NOT: k3.gated_mlp
// CHECK: k3.linear {{.*}} norm({{.*}}) {eps = 1.000000e-05 : f64}
// CHECK: k3.linear {{.*}} norm({{.*}}) {eps = 9.9999999999999995E-7 : f64}
// CHECK: k3.swiglu
func.func @different_eps(%x: tensor<8xbf16>, %n: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                         %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %g = k3.linear %x, %w1 norm(%n) {eps = 1.0e-05 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %u = k3.linear %x, %w3 norm(%n) {eps = 1.0e-06 : f64} : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<8xbf16>) -> tensor<32xbf16>
  %a = k3.swiglu %g, %u : tensor<32xbf16>
  %y = k3.linear %a, %w2 : (tensor<32xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}
