// convert-k3-to-launch's mla-clusters option: an mla_attend of the K3 /
// Kimi-Linear head shape (L = 512, P = V = 128, R = 64) whose heads fit 4
// blocks each on the SMs, two per SM, launches mla_attend_clustered, each
// head on a cluster of 4 blocks (grid 4 · heads, 256 threads), when its
// cache holds at most 4096 rows; with the option off or 67 heads (268
// blocks, more than two per SM of 132), mla_attend on one block per SM
// without clusters. A cache of 8192 rows gets both launches, split at
// handover = 4096 (the clustered form's rows): mla_attend_clustered attends
// contexts up to 4096, mla_attend after it the longer ones.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=ON
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch="mla-clusters=false" | FileCheck %s --check-prefix=OFF
// The clustered launch verifies and round-trips.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | k3-opt -split-input-file | FileCheck %s --check-prefix=ON

// Before:
//   %att = k3.mla_attend %q, %kvb, %cache, %pos {config = #k3.mla<heads = 2, kv_lora = 512, nope = 128, rope = 64, v_dim = 128>}
// After (on):
//   k3l.launch "mla_attend_clustered"(...) {..., block = array<i64: 256, 1, 1>, cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>, ...}
// ON-LABEL: func.func @kimi_linear_heads
// ON: k3l.launch "mla_attend_clustered"
// ON-SAME: block = array<i64: 256, 1, 1>, cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>
// OFF-LABEL: func.func @kimi_linear_heads
// OFF: k3l.launch "mla_attend"(
// OFF-NOT: cluster
// OFF-SAME: grid = array<i64: 132, 1, 1>
func.func @kimi_linear_heads(%pos: index) -> tensor<16xf32> {
  %q = k3.weight "q" : tensor<384xbf16>
  %kvb = k3.weight "kv_b_proj.weight" : tensor<512x512xbf16>
  %cache = k3.state "layers.1.mla" : !k3.mla_cache<max_seq = 64, width = 576>
  %att = k3.mla_attend %q, %kvb, %cache, %pos
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 512, nope = 128, rope = 64, v_dim = 128>}
           : (tensor<384xbf16>, tensor<512x512xbf16>, !k3.mla_cache<max_seq = 64, width = 576>, index) -> tensor<256xbf16>
  %head = k3.weight "head" : tensor<16x256xbf16>
  %logits = k3.linear %att, %head : (tensor<256xbf16>, tensor<16x256xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// ON-LABEL: func.func @too_many_heads
// ON: k3l.launch "mla_attend"(
// ON-NOT: cluster
// ON-SAME: grid = array<i64: 132, 1, 1>
// OFF-LABEL: func.func @too_many_heads
// OFF: k3l.launch "mla_attend"
// OFF-NOT: cluster
// OFF-SAME: grid = array<i64: 132, 1, 1>
func.func @too_many_heads(%pos: index) -> tensor<16xf32> {
  %q = k3.weight "q" : tensor<12864xbf16>
  %kvb = k3.weight "kv_b_proj.weight" : tensor<17152x512xbf16>
  %cache = k3.state "layers.1.mla" : !k3.mla_cache<max_seq = 64, width = 576>
  %att = k3.mla_attend %q, %kvb, %cache, %pos
           {config = #k3.mla<heads = 67, q_lora = 0, kv_lora = 512, nope = 128, rope = 64, v_dim = 128>}
           : (tensor<12864xbf16>, tensor<17152x512xbf16>, !k3.mla_cache<max_seq = 64, width = 576>, index) -> tensor<8576xbf16>
  %head = k3.weight "head" : tensor<16x8576xbf16>
  %logits = k3.linear %att, %head : (tensor<8576xbf16>, tensor<16x8576xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// Before: as @kimi_linear_heads, the cache !k3.mla_cache<max_seq = 8192, ...>
// After (on):
//   k3l.launch "mla_attend_clustered"(...) {..., cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>, ..., scalars = {handover = 4096 : i64, ...}}
//   k3l.launch "mla_attend"(...) {..., grid = array<i64: 132, 1, 1>, ..., scalars = {handover = 4096 : i64, ...}}
// ON-LABEL: func.func @long_cache
// ON: k3l.launch "mla_attend_clustered"(
// ON-SAME: cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>
// ON-SAME: handover = 4096 : i64
// ON-NEXT: k3l.launch "mla_attend"(
// ON-NOT: cluster
// ON-SAME: grid = array<i64: 132, 1, 1>
// ON-SAME: handover = 4096 : i64
// OFF-LABEL: func.func @long_cache
// OFF: k3l.launch "mla_attend"
// OFF-NOT: cluster
// OFF-NOT: handover
// OFF-SAME: grid = array<i64: 132, 1, 1>
// OFF-NOT: k3l.launch "mla_attend
func.func @long_cache(%pos: index) -> tensor<16xf32> {
  %q = k3.weight "q" : tensor<384xbf16>
  %kvb = k3.weight "kv_b_proj.weight" : tensor<512x512xbf16>
  %cache = k3.state "layers.1.mla" : !k3.mla_cache<max_seq = 8192, width = 576>
  %att = k3.mla_attend %q, %kvb, %cache, %pos
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 512, nope = 128, rope = 64, v_dim = 128>}
           : (tensor<384xbf16>, tensor<512x512xbf16>, !k3.mla_cache<max_seq = 8192, width = 576>, index) -> tensor<256xbf16>
  %head = k3.weight "head" : tensor<16x256xbf16>
  %logits = k3.linear %att, %head : (tensor<256xbf16>, tensor<16x256xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
