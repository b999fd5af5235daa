// RUN: k3-opt %s -split-input-file -k3-fuse-residual | FileCheck %s

// add(r, linear) → the linear's residual epilogue, keeping its norm and the
// norm's eps (1e-6 here, so that a default would show).
// CHECK-LABEL: func.func @residual
// CHECK-SAME: (%[[R:[^:]*]]: tensor<16xbf16>, %[[X:[^:]*]]: tensor<8xbf16>, %[[W:[^:]*]]: tensor<16x8xbf16>, %[[N:[^:]*]]: tensor<8xbf16>)
// CHECK-NOT: k3.add
// CHECK: %[[Y:.*]] = k3.linear %[[X]], %[[W]] norm(%[[N]]) residual(%[[R]]) {eps = 9.9999999999999995E-7 : f64}
// CHECK-NOT: k3.add
// CHECK: return %[[Y]]
func.func @residual(%r: tensor<16xbf16>, %x: tensor<8xbf16>, %w: tensor<16x8xbf16>, %n: tensor<8xbf16>) -> tensor<16xbf16> {
  %p = k3.linear %x, %w norm(%n) {eps = 1.0e-06 : f64}
         : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<8xbf16>) -> tensor<16xbf16>
  %s = k3.add %r, %p : tensor<16xbf16>
  return %s : tensor<16xbf16>
}

// -----

// Both sides are projections: the one defined later takes the other as its
// residual (the projection is rebuilt at the add, after both).
// CHECK-LABEL: func.func @two_linears
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[A:[^:]*]]: tensor<16x8xbf16>, %[[B:[^:]*]]: tensor<16x8xbf16>)
// CHECK-NOT: k3.add
// CHECK: %[[P:.*]] = k3.linear %[[X]], %[[A]] :
// CHECK-NEXT: %[[Q:.*]] = k3.linear %[[X]], %[[B]] residual(%[[P]]) :
// CHECK-NOT: k3.add
// CHECK: return %[[Q]]
func.func @two_linears(%x: tensor<8xbf16>, %a: tensor<16x8xbf16>, %b: tensor<16x8xbf16>) -> tensor<16xbf16> {
  %p = k3.linear %x, %a : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %q = k3.linear %x, %b : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %s = k3.add %q, %p : tensor<16xbf16>
  return %s : tensor<16xbf16>
}

// -----

// The residual is defined after the projection: the fused projection is
// built at the add, where both are available.
// CHECK-LABEL: func.func @late_residual
// CHECK: %[[R:.*]] = k3.mul_sigmoid
// CHECK-NEXT: %[[Y:.*]] = k3.linear %{{.*}}, %{{.*}} residual(%[[R]])
// CHECK-NEXT: return %[[Y]]
func.func @late_residual(%x: tensor<8xbf16>, %w: tensor<16x8xbf16>, %r: tensor<16xbf16>) -> tensor<16xbf16> {
  %p = k3.linear %x, %w : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %g = k3.mul_sigmoid %r, %r : tensor<16xbf16>
  %s = k3.add %p, %g : tensor<16xbf16>
  return %s : tensor<16xbf16>
}

// -----

// Not fused: the projection's plain result is still needed.
// CHECK-LABEL: func.func @linear_two_users
// CHECK: %[[P:.*]] = k3.linear
// CHECK-NOT: residual(
// CHECK: %[[S:.*]] = k3.add %{{.*}}, %[[P]]
// CHECK: return %[[S]], %[[P]]
func.func @linear_two_users(%r: tensor<16xbf16>, %x: tensor<8xbf16>, %w: tensor<16x8xbf16>) -> (tensor<16xbf16>, tensor<16xbf16>) {
  %p = k3.linear %x, %w : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xbf16>
  %s = k3.add %r, %p : tensor<16xbf16>
  return %s, %p : tensor<16xbf16>, tensor<16xbf16>
}

// -----

// Not fused: the projection already has a residual epilogue.
// CHECK-LABEL: func.func @already_residual
// CHECK: k3.linear {{.*}} residual(
// CHECK: k3.add
func.func @already_residual(%r: tensor<16xbf16>, %x: tensor<8xbf16>, %w: tensor<16x8xbf16>) -> tensor<16xbf16> {
  %p = k3.linear %x, %w residual(%r) : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  %s = k3.add %r, %p : tensor<16xbf16>
  return %s : tensor<16xbf16>
}

