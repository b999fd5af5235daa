// RUN: k3-opt %s -split-input-file -k3-fuse-kda | FileCheck %s
// RUN: k3-opt %s -split-input-file -k3-fuse-kda='low-rank-gates=false' | FileCheck %s --check-prefix=NOFOLD

// The KDA chain between the projections becomes one k3.kda_decode. The
// conv width (3, from the conv weights) differs from head_dim (4), and the
// gated norm's eps (2e-5) is not the usual 1e-5, so that a fused op built
// from the wrong source shows.
// CHECK-LABEL: func.func @kda
// CHECK-SAME: (%[[UQ:[^:]*]]: tensor<8xbf16>, %[[UK:[^:]*]]: tensor<8xbf16>, %[[UV:[^:]*]]: tensor<8xbf16>, %[[F:[^:]*]]: tensor<8xbf16>,
// CHECK-SAME: %[[B:[^:]*]]: tensor<2xbf16>, %[[GT:[^:]*]]: tensor<8xbf16>, %[[CW:[^:]*]]: tensor<8x1x3xbf16>, %[[CS:[^:]*]]: !k3.conv_state
// CHECK-SAME: %[[S:[^:]*]]: !k3.kda_state<{{[^>]*}}>, %[[DT:[^:]*]]: tensor<8xf32>, %[[AL:[^:]*]]: tensor<2xf32>, %[[ON:[^:]*]]: tensor<4xbf16>)
// CHECK-NOT: k3.conv_step
// CHECK-NOT: k3.l2norm
// CHECK-NOT: k3.kda_gate
// CHECK-NOT: k3.sigmoid
// CHECK-NOT: k3.kda_step
// CHECK-NOT: k3.gated_rms_norm
// CHECK: %[[Y:.*]] = k3.kda_decode %[[UQ]], %[[UK]], %[[UV]], %[[F]], %[[B]], %[[GT]], %[[CS]], %[[S]]
// CHECK-SAME: weights(%[[CW]], %[[CW]], %[[CW]], %[[DT]], %[[AL]], %[[ON]])
// CHECK-SAME: {config = #k3.kda<heads = 2, head_dim = 4, conv = 3, full_rank_gate = true, lower_bound = -5.000000e+00 : f64>,
// CHECK-SAME: eps = 2.000000e-05 : f64}
// CHECK-NOT: k3.conv_step
// CHECK-NOT: k3.l2norm
// CHECK-NOT: k3.kda_gate
// CHECK-NOT: k3.sigmoid
// CHECK-NOT: k3.kda_step
// CHECK-NOT: k3.gated_rms_norm
// CHECK: return %[[Y]]
func.func @kda(%uq: tensor<8xbf16>, %uk: tensor<8xbf16>, %uv: tensor<8xbf16>, %f: tensor<8xbf16>,
               %b: tensor<2xbf16>, %gt: tensor<8xbf16>, %cw: tensor<8x1x3xbf16>,
               %cs: !k3.conv_state<channels = 24, window = 2>,
               %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
               %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x3xbf16>, !k3.conv_state<channels = 24, window = 2>) -> tensor<8xbf16>
  %kc = k3.conv_step %uk, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x3xbf16>, !k3.conv_state<channels = 24, window = 2>) -> tensor<8xbf16>
  %vc = k3.conv_step %uv, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x3xbf16>, !k3.conv_state<channels = 24, window = 2>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64, lower_bound = -5.0 : f64}
         : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 2.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// A low-rank output gate (g_b(g_a h)) is recorded in the config; the softplus
// gate (no lower_bound) carries over. With low-rank-gates (the default) the
// second projection g_b is folded into the op: it takes R(g_a h) and g_b;
// without, g_b stays a linear of its own.
// CHECK-LABEL: func.func @kda_low_rank
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[GA:[^:]*]]: tensor<4x8xbf16>, %[[GB:[^:]*]]: tensor<8x4xbf16>,
// CHECK-NOT: k3.kda_step
// CHECK: %[[GTA:.*]] = k3.linear %[[H]], %[[GA]] :
// CHECK-NEXT: %[[Y:.*]] = k3.kda_decode {{.*}}, %[[GTA]],
// CHECK-SAME: g_b(%[[GB]]) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.000000e-05 : f64}
// CHECK-NOT: f_b(
// CHECK-NOT: k3.gated_rms_norm
// CHECK: return %[[Y]]
// NOFOLD-LABEL: func.func @kda_low_rank
// NOFOLD-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[GA:[^:]*]]: tensor<4x8xbf16>, %[[GB:[^:]*]]: tensor<8x4xbf16>,
// NOFOLD: %[[GTA:.*]] = k3.linear %[[H]], %[[GA]] :
// NOFOLD-NEXT: %[[GT:.*]] = k3.linear %[[GTA]], %[[GB]] :
// NOFOLD-NEXT: %[[Y:.*]] = k3.kda_decode {{.*}}, %[[GT]],
// NOFOLD-NOT: g_b(
// NOFOLD-SAME: {config = #k3.kda<heads = 2, head_dim = 4, conv = 4>, eps = 1.000000e-05 : f64}
func.func @kda_low_rank(%h: tensor<8xbf16>, %ga: tensor<4x8xbf16>, %gb: tensor<8x4xbf16>,
                        %uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
                        %cs: !k3.conv_state<channels = 24, window = 3>,
                        %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                        %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %gta = k3.linear %h, %ga : (tensor<8xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
  %gt = k3.linear %gta, %gb : (tensor<4xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// The decay gate's f = f_b(f_a h) folds too (K3 and Kimi-Linear both have
// it). Not folded: a projection whose result has another use (the output
// gate here, also returned), or one whose input is no projection (a
// full-rank gate such as K3's g_proj: its input is the normed h; here the
// argument %ga).
// CHECK-LABEL: func.func @kda_low_rank_f
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[FAW:[^:]*]]: tensor<4x8xbf16>, %[[FB:[^:]*]]: tensor<8x4xbf16>, %[[GA:[^:]*]]: tensor<4xbf16>, %[[GB:[^:]*]]: tensor<8x4xbf16>,
// CHECK: %[[FA:.*]] = k3.linear %[[H]], %[[FAW]] :
// CHECK: %[[GT:.*]] = k3.linear %[[GA]], %[[GB]] :
// CHECK-NEXT: %[[Y:.*]] = k3.kda_decode {{[^,]*}}, {{[^,]*}}, {{[^,]*}}, %[[FA]], {{[^,]*}}, %[[GT]],
// CHECK-SAME: f_b(%[[FB]]) {config
// CHECK: return %[[Y]], %[[GT]]
// NOFOLD-LABEL: func.func @kda_low_rank_f
// NOFOLD: k3.linear
// NOFOLD: k3.linear
// NOFOLD: k3.linear
// NOFOLD-NOT: f_b(
// NOFOLD: return
func.func @kda_low_rank_f(%h: tensor<8xbf16>, %faw: tensor<4x8xbf16>, %fbw: tensor<8x4xbf16>, %ga: tensor<4xbf16>, %gbw: tensor<8x4xbf16>,
                          %uq: tensor<8xbf16>, %b: tensor<2xbf16>, %cw: tensor<8x1x4xbf16>,
                          %cs: !k3.conv_state<channels = 24, window = 3>,
                          %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                          %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %fa = k3.linear %h, %faw : (tensor<8xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
  %f = k3.linear %fa, %fbw : (tensor<4xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %gt = k3.linear %ga, %gbw : (tensor<4xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y, %gt : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: the q/k conv offsets are swapped (k would be read from q's
// channels of the conv state).
// CHECK-LABEL: func.func @swapped_offsets
// CHECK-NOT: k3.kda_decode
// CHECK: k3.conv_step
// CHECK: k3.kda_step
// CHECK: k3.gated_rms_norm
func.func @swapped_offsets(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                           %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>,
                           %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                           %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the q l2norm scale is not 1/sqrt(head_dim), which the kernel
// hard-codes.
// CHECK-LABEL: func.func @wrong_scale
// CHECK-NOT: k3.kda_decode
// CHECK: k3.l2norm {{.*}}scale = 2.500000e-01
func.func @wrong_scale(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                       %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>,
                       %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                       %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.25 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the recurrence output o is also returned, so it must stay.
// CHECK-LABEL: func.func @o_escapes
// CHECK-NOT: k3.kda_decode
// CHECK: %[[O:.*]] = k3.kda_step
// CHECK: k3.gated_rms_norm %[[O]]
func.func @o_escapes(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                     %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>,
                     %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                     %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y, %o : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: an l2norm eps is not the 1e-6 the kernel hard-codes.
// CHECK-LABEL: func.func @wrong_l2norm_eps
// CHECK-NOT: k3.kda_decode
// CHECK: k3.l2norm {{.*}}eps = 9.9999999999999995E-7 : f64, head_dim = 4 : i64, scale = 5.000000e-01
// CHECK: k3.l2norm {{.*}}eps = 1.000000e-05 : f64, head_dim = 4 : i64, scale = 1.000000e+00
// CHECK: k3.kda_step
func.func @wrong_l2norm_eps(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                       %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>,
                       %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                       %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-05 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the k l2norm scale is not 1.
// CHECK-LABEL: func.func @wrong_k_scale
// CHECK-NOT: k3.kda_decode
// CHECK: k3.l2norm {{.*}}scale = 5.000000e-01
// CHECK: k3.l2norm {{.*}}scale = 5.000000e-01
// CHECK: k3.kda_step
func.func @wrong_k_scale(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                       %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 24, window = 3>,
                       %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                       %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 24, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Not fused: the conv state holds more channels than q, k and v (the fused
// kernel addresses it as exactly three slices of C).
// CHECK-LABEL: func.func @conv_state_too_wide
// CHECK-NOT: k3.kda_decode
// CHECK: k3.conv_step
// CHECK: k3.kda_step
func.func @conv_state_too_wide(%uq: tensor<8xbf16>, %f: tensor<8xbf16>, %b: tensor<2xbf16>, %gt: tensor<8xbf16>,
                       %cw: tensor<8x1x4xbf16>, %cs: !k3.conv_state<channels = 32, window = 3>,
                       %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                       %dt: tensor<8xf32>, %alog: tensor<2xf32>, %on: tensor<4xbf16>) -> tensor<8xbf16> {
  %qc = k3.conv_step %uq, %cw, %cs {offset = 0 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 32, window = 3>) -> tensor<8xbf16>
  %kc = k3.conv_step %uq, %cw, %cs {offset = 8 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 32, window = 3>) -> tensor<8xbf16>
  %vc = k3.conv_step %uq, %cw, %cs {offset = 16 : i64}
          : (tensor<8xbf16>, tensor<8x1x4xbf16>, !k3.conv_state<channels = 32, window = 3>) -> tensor<8xbf16>
  %q = k3.l2norm %qc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 0.5 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %k = k3.l2norm %kc {head_dim = 4 : i64, eps = 1.0e-06 : f64, scale = 1.0 : f64} : tensor<8xbf16> -> tensor<8xf32>
  %g = k3.kda_gate %f, %dt, %alog {heads = 2 : i64} : (tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>) -> tensor<8xf32>
  %beta = k3.sigmoid %b : tensor<2xbf16> -> tensor<2xf32>
  %o = k3.kda_step %q, %k, %vc, %g, %beta, %s
         : (tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<2xf32>,
            !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>) -> tensor<8xbf16>
  %y = k3.gated_rms_norm %o, %gt, %on {head_dim = 4 : i64, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<8xbf16>, tensor<4xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}
