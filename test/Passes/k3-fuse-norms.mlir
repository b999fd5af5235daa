// RUN: k3-opt %s -split-input-file -k3-fuse-norms | FileCheck %s

// A norm read only as the input of projections folds into each of them.
// CHECK-LABEL: func.func @norm_into_linears
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W:[^:]*]]: tensor<8xbf16>, %[[A:[^:]*]]: tensor<16x8xbf16>,
// CHECK-SAME: %[[B:[^:]*]]: tensor<4x8xbf16>, %[[R:[^:]*]]: tensor<4xbf16>)
// CHECK-NOT: k3.rms_norm
// CHECK-DAG: %[[P:.*]] = k3.linear %[[X]], %[[A]] norm(%[[W]]) {eps = 1.000000e-05 : f64}
// CHECK-DAG: %[[Q:.*]] = k3.linear %[[X]], %[[B]] norm(%[[W]]) residual(%[[R]]) {eps = 1.000000e-05 : f64}
// CHECK-NOT: k3.rms_norm
// CHECK: return %[[P]], %[[Q]]
func.func @norm_into_linears(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %a: tensor<16x8xbf16>, %b: tensor<4x8xbf16>,
                             %r: tensor<4xbf16>) -> (tensor<16xbf16>, tensor<4xbf16>) {
  %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %p = k3.linear %n, %a : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %q = k3.linear %n, %b residual(%r) : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  return %p, %q : tensor<16xbf16>, tensor<4xbf16>
}

// -----

// The final norm folds into the f32 vocabulary projection too.
// CHECK-LABEL: func.func @norm_into_lm_head
// CHECK-NOT: k3.rms_norm
// CHECK: k3.linear %{{.*}}, %{{.*}} norm(%{{.*}}) {eps = 1.000000e-05 : f64} : {{.*}} -> tensor<16xf32>
// CHECK-NOT: k3.rms_norm
func.func @norm_into_lm_head(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %head: tensor<16x8xbf16>) -> tensor<16xf32> {
  %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %l = k3.linear %n, %head : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xf32>
  return %l : tensor<16xf32>
}

// -----

// Not folded: the normalised vector is also read by a non-linear op.
// CHECK-LABEL: func.func @norm_with_other_user
// CHECK: %[[N:.*]] = k3.rms_norm
// CHECK: k3.linear %[[N]], %{{[^ ]*}} :
// CHECK: k3.router %[[N]]
func.func @norm_with_other_user(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %a: tensor<16x8xbf16>,
                                %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>) -> (tensor<16xbf16>, tensor<2xi32>) {
  %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %p = k3.linear %n, %a : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %ids, %wts = k3.router %n, %gate, %bias {top_k = 2 : i64, renormalize = true, scaling = 1.0 : f64}
                 : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>) -> (tensor<2xi32>, tensor<2xf32>)
  return %p, %ids : tensor<16xbf16>, tensor<2xi32>
}

// -----

// Not folded: a projection uses the norm as its residual, not its input.
// CHECK-LABEL: func.func @norm_as_residual
// CHECK: %[[N:.*]] = k3.rms_norm
// CHECK: k3.linear %{{.*}}, %{{.*}} residual(%[[N]])
func.func @norm_as_residual(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %a: tensor<8x8xbf16>) -> tensor<8xbf16> {
  %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %p = k3.linear %x, %a residual(%n) : (tensor<8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return %p : tensor<8xbf16>
}

// -----

// The eps travels with the norm: a q_a / kv_a style layernorm (eps 1e-6)
// gives its projection eps 1e-6, not rms_norm_eps.
// CHECK-LABEL: func.func @norm_eps_1e6
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W:[^:]*]]: tensor<8xbf16>, %[[B:[^:]*]]: tensor<16x8xbf16>)
// CHECK-NOT: k3.rms_norm
// CHECK: %[[Q:.*]] = k3.linear %[[X]], %[[B]] norm(%[[W]]) {eps = 9.9999999999999995E-7 : f64}
// CHECK-NOT: k3.rms_norm
// CHECK: return %[[Q]]
func.func @norm_eps_1e6(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %b: tensor<16x8xbf16>) -> tensor<16xbf16> {
  %n = k3.rms_norm %x, %w {eps = 1.0e-06 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %q = k3.linear %n, %b : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  return %q : tensor<16xbf16>
}

// -----

// Not folded: the projection already normalises its input (a second norm
// cannot be fused on top).
// CHECK-LABEL: func.func @linear_has_norm
// CHECK: %[[N:.*]] = k3.rms_norm %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64}
// CHECK: k3.linear %[[N]], %{{.*}} norm(%{{.*}}) {eps = 9.9999999999999995E-7 : f64}
func.func @linear_has_norm(%x: tensor<8xbf16>, %w: tensor<8xbf16>, %w2: tensor<8xbf16>,
                           %b: tensor<16x8xbf16>) -> tensor<16xbf16> {
  %n = k3.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %q = k3.linear %n, %b norm(%w2) {eps = 1.0e-06 : f64} : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<8xbf16>) -> tensor<16xbf16>
  return %q : tensor<16xbf16>
}
