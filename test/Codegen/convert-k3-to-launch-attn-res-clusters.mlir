// convert-k3-to-launch's attn-res-clusters option: a k3.attn_res of K3's
// hidden size (7168: 896 chunks of 8) with 8 committed blocks and the
// partial sum (9 sources) launches attn_res_clustered on one cluster of 8
// blocks of 128 threads (a chunk per thread); a small hidden size (256: 32
// chunks) on one block of 128 without a cluster. Outside the clustered
// form's limits (10 sources; a hidden size not of whole chunks; more than
// 8 · 128 chunks), and with the option off (on by default), attn_res on one
// block of 256.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=ON
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch="attn-res-clusters=false" | FileCheck %s --check-prefix=OFF
// The clustered launch verifies and round-trips.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | k3-opt -split-input-file | FileCheck %s --check-prefix=ON

// Before:
//   %a = k3.attn_res %blocks, %p, %arn, %arp {count = 8 : i64, eps = 1.0e-05 : f64}
// After (on):
//   k3l.launch "attn_res_clustered"(...) {..., block = array<i64: 128, 1, 1>, cluster = array<i64: 8, 1, 1>, grid = array<i64: 8, 1, 1>, ...}
// ON-LABEL: func.func @k3_hidden
// ON: k3l.launch "attn_res_clustered"
// ON-SAME: block = array<i64: 128, 1, 1>, cluster = array<i64: 8, 1, 1>, grid = array<i64: 8, 1, 1>
// ON-SAME: scalars = {dim = 7168 : i64, eps = 1.000000e-05 : f64, numBlocks = 8 : i64}
// OFF-LABEL: func.func @k3_hidden
// OFF: k3l.launch "attn_res"(
// OFF-NOT: cluster
// OFF-SAME: block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>
func.func @k3_hidden() -> tensor<16xf32> {
  %p = k3.weight "partial" : tensor<7168xbf16>
  %blocks = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 9, hidden = 7168>
  %arn = k3.weight "attn_res_norm.weight" : tensor<7168xbf16>
  %arp = k3.weight "attn_res_proj.weight" : tensor<1x7168xbf16>
  %a = k3.attn_res %blocks, %p, %arn, %arp {count = 8 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 9, hidden = 7168>, tensor<7168xbf16>, tensor<7168xbf16>, tensor<1x7168xbf16>) -> tensor<7168xbf16>
  %head = k3.weight "head" : tensor<16x7168xbf16>
  %logits = k3.linear %a, %head : (tensor<7168xbf16>, tensor<16x7168xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// ON-LABEL: func.func @too_many_sources
// ON: k3l.launch "attn_res"(
// ON-NOT: cluster
// ON-SAME: block = array<i64: 256, 1, 1>, grid = array<i64: 1, 1, 1>
// OFF-LABEL: func.func @too_many_sources
// OFF: k3l.launch "attn_res"(
func.func @too_many_sources() -> tensor<16xf32> {
  %p = k3.weight "partial" : tensor<7168xbf16>
  %blocks = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 10, hidden = 7168>
  %arn = k3.weight "attn_res_norm.weight" : tensor<7168xbf16>
  %arp = k3.weight "attn_res_proj.weight" : tensor<1x7168xbf16>
  %a = k3.attn_res %blocks, %p, %arn, %arp {count = 9 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 10, hidden = 7168>, tensor<7168xbf16>, tensor<7168xbf16>, tensor<1x7168xbf16>) -> tensor<7168xbf16>
  %head = k3.weight "head" : tensor<16x7168xbf16>
  %logits = k3.linear %a, %head : (tensor<7168xbf16>, tensor<16x7168xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// A small hidden size: one block, no cluster (the fused norm rides along).
// ON-LABEL: func.func @small_hidden
// ON: k3l.launch "attn_res_clustered"
// ON-NOT: cluster =
// ON-SAME: block = array<i64: 128, 1, 1>, grid = array<i64: 1, 1, 1>
// ON-SAME: normEps
// OFF-LABEL: func.func @small_hidden
// OFF: k3l.launch "attn_res"(
func.func @small_hidden() -> tensor<16xf32> {
  %p = k3.weight "partial" : tensor<256xbf16>
  %blocks = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 256>
  %arn = k3.weight "attn_res_norm.weight" : tensor<256xbf16>
  %arp = k3.weight "attn_res_proj.weight" : tensor<1x256xbf16>
  %fn = k3.weight "norm.weight" : tensor<256xbf16>
  %a = k3.attn_res %blocks, %p, %arn, %arp then_norm(%fn) {count = 2 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 256>, tensor<256xbf16>, tensor<256xbf16>, tensor<1x256xbf16>, tensor<256xbf16>) -> tensor<256xbf16>
  %head = k3.weight "head" : tensor<16x256xbf16>
  %logits = k3.linear %a, %head : (tensor<256xbf16>, tensor<16x256xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// Hidden sizes the clustered form does not take: 7172 (not whole chunks of
// 8) and, below, 8200 (1025 chunks, more than 8 blocks of 128 threads hold).
// ON-LABEL: func.func @odd_hidden
// ON: k3l.launch "attn_res"(
// ON-NOT: cluster
// ON-SAME: block = array<i64: 256, 1, 1>
func.func @odd_hidden() -> tensor<16xf32> {
  %p = k3.weight "partial" : tensor<7172xbf16>
  %b1 = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 7172>
  %n1 = k3.weight "n1" : tensor<7172xbf16>
  %p1 = k3.weight "p1" : tensor<1x7172xbf16>
  %a = k3.attn_res %b1, %p, %n1, %p1 {count = 2 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 7172>, tensor<7172xbf16>, tensor<7172xbf16>, tensor<1x7172xbf16>) -> tensor<7172xbf16>
  %h1 = k3.weight "h1" : tensor<16x7172xbf16>
  %l1 = k3.linear %a, %h1 : (tensor<7172xbf16>, tensor<16x7172xbf16>) -> tensor<16xf32>
  return %l1 : tensor<16xf32>
}

// -----

// ON-LABEL: func.func @wide_hidden
// ON: k3l.launch "attn_res"(
// ON-NOT: cluster
// ON-SAME: block = array<i64: 256, 1, 1>
func.func @wide_hidden() -> tensor<16xf32> {
  %q = k3.weight "partial" : tensor<8200xbf16>
  %b2 = k3.state "attn_res" : !k3.attn_res_blocks<max_blocks = 3, hidden = 8200>
  %n2 = k3.weight "n2" : tensor<8200xbf16>
  %p2 = k3.weight "p2" : tensor<1x8200xbf16>
  %b = k3.attn_res %b2, %q, %n2, %p2 {count = 2 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8200>, tensor<8200xbf16>, tensor<8200xbf16>, tensor<1x8200xbf16>) -> tensor<8200xbf16>
  %h2 = k3.weight "h2" : tensor<16x8200xbf16>
  %l2 = k3.linear %b, %h2 : (tensor<8200xbf16>, tensor<16x8200xbf16>) -> tensor<16xf32>
  return %l2 : tensor<16xf32>
}
