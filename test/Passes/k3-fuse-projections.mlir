// RUN: k3-opt %s -split-input-file -k3-fuse-projections | FileCheck %s

// A KDA layer's projections of the normed input: q, k, v, f_a, b and g
// (bf16 and MXFP4 weights alike) become one group with the norm and its eps,
// in block order, placed before the first user (f_b reads f_a). The probe of
// the stream and the residual o_proj are left alone.
// CHECK-LABEL: func.func @kda_projections
// CHECK-SAME: (%[[X:[^:]*]]: tensor<32xbf16>, %[[N:[^:]*]]: tensor<32xbf16>, %[[WQ:[^:]*]]: tensor<32x32xbf16>,
// CHECK-SAME: %[[WK:[^:]*]]: tensor<32x32xbf16>, %[[WV:[^:]*]]: !k3.mxfp4<32x32>, %[[WFA:[^:]*]]: tensor<8x32xbf16>,
// CHECK-SAME: %[[WFB:[^:]*]]: tensor<32x8xbf16>, %[[WB:[^:]*]]: tensor<2x32xbf16>, %[[WG:[^:]*]]: tensor<32x32xbf16>,
// CHECK-SAME: %[[WO:[^:]*]]: tensor<32x32xbf16>)
// CHECK-NOT: k3.linear %[[X]]
// CHECK: k3.probe %[[X]]
// CHECK-NOT: k3.linear %[[X]]
// CHECK: %[[G:.*]]:6 = k3.linear_group %[[X]], %[[WQ]], %[[WK]], %[[WV]], %[[WFA]], %[[WB]], %[[WG]] norm(%[[N]])
// CHECK-SAME: {eps = 9.9999999999999995E-7 : f64}
// CHECK-SAME: -> (tensor<32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<8xbf16>, tensor<2xbf16>, tensor<32xbf16>)
// CHECK-NEXT: %[[F:.*]] = k3.linear %[[G]]#3, %[[WFB]] :
// CHECK-NOT: k3.linear %[[X]]
// CHECK: k3.add %[[G]]#0, %[[G]]#1
// CHECK: k3.add %{{.*}}, %[[G]]#2
// CHECK: k3.add %{{.*}}, %[[F]]
// CHECK: k3.mul_sigmoid %{{.*}}, %[[G]]#5
// CHECK: k3.sigmoid %[[G]]#4
// CHECK: k3.linear %{{.*}}, %[[WO]] residual(%[[X]])
// CHECK-NOT: k3.linear_group
// CHECK: return
func.func @kda_projections(%x: tensor<32xbf16>, %n: tensor<32xbf16>, %wq: tensor<32x32xbf16>, %wk: tensor<32x32xbf16>,
                           %wv: !k3.mxfp4<32x32>, %wfa: tensor<8x32xbf16>, %wfb: tensor<32x8xbf16>,
                           %wb: tensor<2x32xbf16>, %wg: tensor<32x32xbf16>, %wo: tensor<32x32xbf16>)
    -> (tensor<32xbf16>, tensor<2xf32>) {
  k3.probe %x {name = "layers.0.out"} : tensor<32xbf16>
  %q = k3.linear %x, %wq norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>) -> tensor<32xbf16>
  %k = k3.linear %x, %wk norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>) -> tensor<32xbf16>
  %v = k3.linear %x, %wv norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, !k3.mxfp4<32x32>, tensor<32xbf16>) -> tensor<32xbf16>
  %fa = k3.linear %x, %wfa norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, tensor<8x32xbf16>, tensor<32xbf16>) -> tensor<8xbf16>
  %f = k3.linear %fa, %wfb : (tensor<8xbf16>, tensor<32x8xbf16>) -> tensor<32xbf16>
  %b = k3.linear %x, %wb norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, tensor<2x32xbf16>, tensor<32xbf16>) -> tensor<2xbf16>
  %g = k3.linear %x, %wg norm(%n) {eps = 1.0e-06 : f64} : (tensor<32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>) -> tensor<32xbf16>
  %s0 = k3.add %q, %k : tensor<32xbf16>
  %s1 = k3.add %s0, %v : tensor<32xbf16>
  %s2 = k3.add %s1, %f : tensor<32xbf16>
  %o = k3.mul_sigmoid %s2, %g : tensor<32xbf16>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %y = k3.linear %o, %wo residual(%x) : (tensor<32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>) -> tensor<32xbf16>
  return %y, %beta : tensor<32xbf16>, tensor<2xf32>
}

// -----

// MLA's q_a and output gate projections of an un-normed input (the norm is
// an op of its own); the group has no norm and no eps. The user of the
// later projection comes first, so the group moves up to it.
// CHECK-LABEL: func.func @mla_projections
// CHECK-SAME: (%[[H:[^:]*]]: tensor<16xbf16>, %[[WQA:[^:]*]]: tensor<8x16xbf16>, %[[WG:[^:]*]]: tensor<16x16xbf16>)
// CHECK-NEXT: %[[G:.*]]:2 = k3.linear_group %[[H]], %[[WQA]], %[[WG]] : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16x16xbf16>) -> (tensor<8xbf16>, tensor<16xbf16>)
// CHECK-NEXT: k3.sigmoid %[[G]]#1
// CHECK-NEXT: k3.sigmoid %[[G]]#0
// CHECK-NOT: k3.linear
func.func @mla_projections(%h: tensor<16xbf16>, %wqa: tensor<8x16xbf16>, %wg: tensor<16x16xbf16>)
    -> (tensor<16xf32>, tensor<8xf32>) {
  %qa = k3.linear %h, %wqa : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  %g = k3.linear %h, %wg : (tensor<16xbf16>, tensor<16x16xbf16>) -> tensor<16xbf16>
  %sg = k3.sigmoid %g : tensor<16xbf16> -> tensor<16xf32>
  %sq = k3.sigmoid %qa : tensor<8xbf16> -> tensor<8xf32>
  return %sg, %sq : tensor<16xf32>, tensor<8xf32>
}

// -----

// Not grouped: different inputs.
// CHECK-LABEL: func.func @different_inputs
// CHECK-NOT: k3.linear_group
// CHECK: k3.linear
// CHECK: k3.linear
// CHECK-NOT: k3.linear_group
func.func @different_inputs(%x: tensor<16xbf16>, %y: tensor<16xbf16>, %w: tensor<8x16xbf16>)
    -> (tensor<8xbf16>, tensor<8xbf16>) {
  %a = k3.linear %x, %w : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  %b = k3.linear %y, %w : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return %a, %b : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not grouped: the same norm weight with different eps, the same eps with
// different norm weights, and a normed with an un-normed projection (each
// pair normalises differently, so no single pre-norm serves both).
// CHECK-LABEL: func.func @different_norms
// CHECK-NOT: k3.linear_group
// CHECK-COUNT-6: k3.linear %
// CHECK-NOT: k3.linear_group
func.func @different_norms(%x: tensor<16xbf16>, %n: tensor<16xbf16>, %n2: tensor<16xbf16>, %w: tensor<8x16xbf16>)
    -> (tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>) {
  %a = k3.linear %x, %w norm(%n) {eps = 1.0e-05 : f64} : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8xbf16>
  %b = k3.linear %x, %w norm(%n) {eps = 1.0e-06 : f64} : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8xbf16>
  %c = k3.linear %x, %w norm(%n2) {eps = 2.0e-05 : f64} : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8xbf16>
  %d = k3.linear %x, %w norm(%n) {eps = 2.0e-06 : f64} : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8xbf16>
  %e = k3.linear %x, %w norm(%n2) {eps = 1.0e-06 : f64} : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>) -> tensor<8xbf16>
  %f = k3.linear %x, %w : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return %a, %b, %c, %d, %e, %f : tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not grouped: a residual epilogue (linear_multi has none) and an fp32
// result (linear_multi rounds every output) leave a single projection of
// %x, which stays a k3.linear.
// CHECK-LABEL: func.func @residual_and_f32
// CHECK-NOT: k3.linear_group
// CHECK: k3.linear %{{.*}}, %{{.*}} residual(
// CHECK: k3.linear %{{.*}}, %{{.*}} : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xf32>
// CHECK: k3.linear %{{.*}}, %{{.*}} : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
// CHECK-NOT: k3.linear_group
func.func @residual_and_f32(%x: tensor<16xbf16>, %w: tensor<8x16xbf16>, %r: tensor<8xbf16>)
    -> (tensor<8xbf16>, tensor<8xf32>, tensor<8xbf16>) {
  %a = k3.linear %x, %w residual(%r) : (tensor<16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %b = k3.linear %x, %w : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xf32>
  %c = k3.linear %x, %w : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return %a, %b, %c : tensor<8xbf16>, tensor<8xf32>, tensor<8xbf16>
}

// -----

// More than 8 (kLinearMultiMax): nine projections become a group of the
// first eight (before their first user, the return) and a single k3.linear,
// which stays where it was; ten are 8 + 2.
// CHECK-LABEL: func.func @nine
// CHECK-SAME: (%[[X:[^:]*]]: tensor<16xbf16>, %[[W0:[^:]*]]: tensor<1x16xbf16>, %[[W1:[^:]*]]: tensor<2x16xbf16>,
// CHECK-SAME: %[[W2:[^:]*]]: tensor<3x16xbf16>, %[[W3:[^:]*]]: tensor<4x16xbf16>, %[[W4:[^:]*]]: tensor<5x16xbf16>,
// CHECK-SAME: %[[W5:[^:]*]]: tensor<6x16xbf16>, %[[W6:[^:]*]]: tensor<7x16xbf16>, %[[W7:[^:]*]]: tensor<8x16xbf16>,
// CHECK-SAME: %[[W8:[^:]*]]: tensor<9x16xbf16>)
// CHECK-NEXT: %[[L:.*]] = k3.linear %[[X]], %[[W8]] :
// CHECK-NEXT: %[[G:.*]]:8 = k3.linear_group %[[X]], %[[W0]], %[[W1]], %[[W2]], %[[W3]], %[[W4]], %[[W5]], %[[W6]], %[[W7]] :
// CHECK-NEXT: return %[[G]]#0, %[[G]]#1, %[[G]]#2, %[[G]]#3, %[[G]]#4, %[[G]]#5, %[[G]]#6, %[[G]]#7, %[[L]]
func.func @nine(%x: tensor<16xbf16>, %w0: tensor<1x16xbf16>, %w1: tensor<2x16xbf16>, %w2: tensor<3x16xbf16>,
                %w3: tensor<4x16xbf16>, %w4: tensor<5x16xbf16>, %w5: tensor<6x16xbf16>, %w6: tensor<7x16xbf16>,
                %w7: tensor<8x16xbf16>, %w8: tensor<9x16xbf16>)
    -> (tensor<1xbf16>, tensor<2xbf16>, tensor<3xbf16>, tensor<4xbf16>, tensor<5xbf16>, tensor<6xbf16>,
        tensor<7xbf16>, tensor<8xbf16>, tensor<9xbf16>) {
  %y0 = k3.linear %x, %w0 : (tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<1xbf16>
  %y1 = k3.linear %x, %w1 : (tensor<16xbf16>, tensor<2x16xbf16>) -> tensor<2xbf16>
  %y2 = k3.linear %x, %w2 : (tensor<16xbf16>, tensor<3x16xbf16>) -> tensor<3xbf16>
  %y3 = k3.linear %x, %w3 : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y4 = k3.linear %x, %w4 : (tensor<16xbf16>, tensor<5x16xbf16>) -> tensor<5xbf16>
  %y5 = k3.linear %x, %w5 : (tensor<16xbf16>, tensor<6x16xbf16>) -> tensor<6xbf16>
  %y6 = k3.linear %x, %w6 : (tensor<16xbf16>, tensor<7x16xbf16>) -> tensor<7xbf16>
  %y7 = k3.linear %x, %w7 : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  %y8 = k3.linear %x, %w8 : (tensor<16xbf16>, tensor<9x16xbf16>) -> tensor<9xbf16>
  return %y0, %y1, %y2, %y3, %y4, %y5, %y6, %y7, %y8
      : tensor<1xbf16>, tensor<2xbf16>, tensor<3xbf16>, tensor<4xbf16>, tensor<5xbf16>, tensor<6xbf16>,
        tensor<7xbf16>, tensor<8xbf16>, tensor<9xbf16>
}

// -----

// CHECK-LABEL: func.func @ten
// CHECK-NEXT: %{{.*}}:8 = k3.linear_group
// CHECK-NEXT: %{{.*}}:2 = k3.linear_group
// CHECK-NOT: k3.linear %
func.func @ten(%x: tensor<16xbf16>, %w: tensor<4x16xbf16>)
    -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>,
        tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) {
  %y0 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y1 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y2 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y3 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y4 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y5 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y6 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y7 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y8 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  %y9 = k3.linear %x, %w : (tensor<16xbf16>, tensor<4x16xbf16>) -> tensor<4xbf16>
  return %y0, %y1, %y2, %y3, %y4, %y5, %y6, %y7, %y8, %y9
      : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>,
        tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
}

// -----

// Dominance: a weight defined after the first user of the set cannot join
// the group there (its projection stays); the other two are grouped.
// CHECK-LABEL: func.func @late_weight
// CHECK: %[[G:.*]]:2 = k3.linear_group %[[X:[^,]*]], %{{.*}}, %{{.*}} :
// CHECK-NEXT: k3.add %[[G]]#0, %[[G]]#1
// CHECK-NEXT: %[[W:.*]] = k3.weight "late.weight"
// CHECK-NEXT: k3.linear %[[X]], %[[W]] :
// CHECK-NOT: k3.linear_group
func.func @late_weight(%x: tensor<16xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %w0 = k3.weight "a.weight" : tensor<8x16xbf16>
  %w1 = k3.weight "b.weight" : tensor<8x16xbf16>
  %a = k3.linear %x, %w0 : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  %b = k3.linear %x, %w1 : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  %s = k3.add %a, %b : tensor<8xbf16>
  %w2 = k3.weight "late.weight" : tensor<8x16xbf16>
  %c = k3.linear %x, %w2 : (tensor<16xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return %s, %c : tensor<8xbf16>, tensor<8xbf16>
}
