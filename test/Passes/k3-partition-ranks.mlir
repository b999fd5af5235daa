// RUN: k3-opt %s -k3-partition-ranks="ranks=2 rank=1" | FileCheck %s
// RUN: k3-opt %s -k3-partition-ranks="ranks=1 rank=0" | FileCheck %s --check-prefix=ONE

// Rank 1 of 2: the KDA heads, the MLP's intermediate rows and the
// vocabulary split; an all-reduce after the mixer and the MLP, an
// all-gather after the lm_head. Weights kept whole (f_a, o_norm) keep
// their type and get no split.
// CHECK: module attributes {k3.rank = 1 : i64, k3.ranks = 2 : i64}
// CHECK-LABEL: func.func @decode_step
// CHECK-DAG: %[[CS:.*]] = k3.state "layers.0.conv" : !k3.conv_state<channels = 12, window = 2>
// CHECK-DAG: %[[S:.*]] = k3.state "layers.0.kda" : !k3.kda_state<heads = 1, key_dim = 4, value_dim = 4>
// CHECK-DAG: k3.weight "q.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4x8xbf16>
// CHECK-DAG: k3.weight "q_conv.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4x1x3xbf16>
// CHECK-DAG: k3.weight "f_a.weight" : tensor<4x8xbf16>
// CHECK-DAG: k3.weight "f_b.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4x4xbf16>
// CHECK-DAG: k3.weight "dt_bias" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4xf32>
// CHECK-DAG: k3.weight "A_log" {split = #k3.split<axis = 2, rank = 1, ranks = 2>} : tensor<1x1x1x1xf32>
// CHECK-DAG: k3.weight "b.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<1x8xbf16>
// CHECK-DAG: k3.weight "o_norm.weight" : tensor<4xbf16>
// CHECK-DAG: k3.weight "o.weight" {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<8x4xbf16>
// CHECK-DAG: k3.weight "g.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4x8xbf16>
// CHECK: %[[P:.*]] = k3.kda %{{.*}}, %[[CS]], %[[S]] weights
// CHECK-SAME: config = #k3.kda<heads = 1, head_dim = 4, conv = 3, full_rank_gate = true, lower_bound = -5.000000e+00 : f64>
// CHECK: %[[Y:.*]] = k3.all_reduce %[[P]] {ranks = 2 : i64} : tensor<8xbf16> -> tensor<8xbf16>
// CHECK-DAG: k3.weight "w1.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<8x8xbf16>
// CHECK-DAG: k3.weight "w2.weight" {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<8x8xbf16>
// CHECK: %[[M:.*]] = k3.dense_mlp %[[Y]],
// CHECK-SAME: -> tensor<8xbf16>
// CHECK: %[[MS:.*]] = k3.all_reduce %[[M]] {ranks = 2 : i64}
// CHECK: k3.weight "lm_head.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<8x8xbf16>
// CHECK: %[[L:.*]] = k3.lm_head %[[MS]], %{{.*}} : tensor<8xbf16>, tensor<8x8xbf16> -> tensor<8xf32>
// CHECK: %[[G:.*]] = k3.all_gather %[[L]] {ranks = 2 : i64} : tensor<8xf32> -> tensor<16xf32>
// CHECK: return %[[G]]

// One rank: nothing changes.
// ONE-NOT: split
// ONE-NOT: k3.all_
// ONE-NOT: k3.rank
module {
  func.func @decode_step(%h: tensor<8xbf16>) -> tensor<16xf32> {
    %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 2>
    %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
    %wq = k3.weight "q.weight" : tensor<8x8xbf16>
    %wk = k3.weight "k.weight" : tensor<8x8xbf16>
    %wv = k3.weight "v.weight" : tensor<8x8xbf16>
    %cq = k3.weight "q_conv.weight" : tensor<8x1x3xbf16>
    %ck = k3.weight "k_conv.weight" : tensor<8x1x3xbf16>
    %cv = k3.weight "v_conv.weight" : tensor<8x1x3xbf16>
    %fa = k3.weight "f_a.weight" : tensor<4x8xbf16>
    %fb = k3.weight "f_b.weight" : tensor<8x4xbf16>
    %dt = k3.weight "dt_bias" : tensor<8xf32>
    %alog = k3.weight "A_log" : tensor<1x1x2x1xf32>
    %wb = k3.weight "b.weight" : tensor<2x8xbf16>
    %on = k3.weight "o_norm.weight" : tensor<4xbf16>
    %wo = k3.weight "o.weight" : tensor<8x8xbf16>
    %wg = k3.weight "g.weight" : tensor<8x8xbf16>
    %y = k3.kda %h, %cs, %s weights(%wq, %wk, %wv, %cq, %ck, %cv, %fa, %fb, %dt, %alog, %wb, %on, %wo) gate(%wg)
           {config = #k3.kda<heads = 2, head_dim = 4, conv = 3, full_rank_gate = true, lower_bound = -5.0>, eps = 2.0e-05 : f64}
           : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 2>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
              tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>,
              tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<1x1x2x1xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
              tensor<8x8xbf16>) -> tensor<8xbf16>
    %w1 = k3.weight "w1.weight" : tensor<16x8xbf16>
    %w3 = k3.weight "w3.weight" : tensor<16x8xbf16>
    %w2 = k3.weight "w2.weight" : tensor<8x16xbf16>
    %m = k3.dense_mlp %y, %w1, %w3, %w2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
    %lw = k3.weight "lm_head.weight" : tensor<16x8xbf16>
    %l = k3.lm_head %m, %lw : tensor<8xbf16>, tensor<16x8xbf16> -> tensor<16xf32>
    return %l : tensor<16xf32>
  }
}
