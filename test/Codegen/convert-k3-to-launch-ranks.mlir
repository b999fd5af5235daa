// convert-k3-to-launch on one rank of a tensor-parallel step
// (k3-partition-ranks): a split weight keeps its part's shape and records
// its split as [axis, rank, ranks]; the collectives become launches of
// all_reduce / all_gather (grid 1: the backend's communicator computes
// them, kernels/collective/CollectiveParams.h).
// RUN: k3-opt %s --convert-k3-to-launch | FileCheck %s
// RUN: k3-opt %s --convert-k3-to-launch | k3-opt | FileCheck %s

// CHECK-LABEL: func.func @decode_step
// CHECK: k3l.weight "embed.weight" {format = "bf16", shape = array<i64: 16, 8>} : !k3l.ptr
// CHECK: %[[W:[0-9]+]] = k3l.weight "o.weight" {format = "bf16", shape = array<i64: 8, 4>, split = array<i64: 1, 1, 2>} : !k3l.ptr
// CHECK: k3l.launch "linear"(%{{.*}}, %[[W]], %[[P:[0-9]+]])
// CHECK: k3l.launch "all_reduce"(%[[P]], %[[S:[0-9]+]])
// CHECK-SAME: arg_names = ["x", "out"]
// CHECK-SAME: grid = array<i64: 1, 1, 1>
// CHECK-SAME: op = "k3.all_reduce", scalars = {n = 8 : i64}
// CHECK: %[[H:[0-9]+]] = k3l.weight "lm_head.weight" {format = "bf16", shape = array<i64: 8, 8>, split = array<i64: 0, 1, 2>} : !k3l.ptr
// CHECK: k3l.launch "linear"(%[[S]], %[[H]], %[[L:[0-9]+]])
// CHECK: k3l.launch "all_gather"(%[[L]], %[[G:[0-9]+]])
// CHECK-SAME: arg_names = ["x", "out"]
// CHECK-SAME: op = "k3.all_gather", scalars = {n = 8 : i64, ranks = 2 : i64}
// The gathered logits are the step's: every rank picks the same token.
// CHECK: k3l.logits %[[G]]
module attributes {k3.rank = 1 : i64, k3.ranks = 2 : i64} {
  func.func @decode_step(%tok: i32, %pos: index) -> tensor<16xf32> {
    %table = k3.weight "embed.weight" : tensor<16x8xbf16>
    %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
    // This rank's 4 of the 8 inputs (a stand-in for its half of a mixer's
    // output).
    %xs = k3.weight "x_part" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<4x8xbf16>
    %h = k3.linear %x, %xs : (tensor<8xbf16>, tensor<4x8xbf16>) -> tensor<4xbf16>
    %wo = k3.weight "o.weight" {split = #k3.split<axis = 1, rank = 1, ranks = 2>} : tensor<8x4xbf16>
    %p = k3.linear %h, %wo : (tensor<4xbf16>, tensor<8x4xbf16>) -> tensor<8xbf16>
    %s = k3.all_reduce %p {ranks = 2 : i64} : tensor<8xbf16> -> tensor<8xbf16>
    %lw = k3.weight "lm_head.weight" {split = #k3.split<axis = 0, rank = 1, ranks = 2>} : tensor<8x8xbf16>
    %l = k3.linear %s, %lw : (tensor<8xbf16>, tensor<8x8xbf16>) -> tensor<8xf32>
    %g = k3.all_gather %l {ranks = 2 : i64} : tensor<8xf32> -> tensor<16xf32>
    return %g : tensor<16xf32>
  }
}
