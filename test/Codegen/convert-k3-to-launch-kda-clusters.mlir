// convert-k3-to-launch's kda-clusters option: a kda_decode of 128-wide
// heads with a conv of at most 4 taps launches each head on a cluster of 4
// blocks (grid 4 · heads, 256 threads); other heads, or the option off,
// launch the same grid without clusters.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=ON
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch="kda-clusters=false" | FileCheck %s --check-prefix=OFF
// The clustered launch verifies and round-trips.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | k3-opt -split-input-file | FileCheck %s --check-prefix=ON

// Before:
//   %y = k3.kda_decode ... {config = #k3.kda<heads = 2, head_dim = 128, conv = 4>, ...}
// After (on):
//   k3l.launch "kda_decode"(...) {..., block = array<i64: 256, 1, 1>, cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>, ...}
// ON-LABEL: func.func @heads_of_128
// ON: k3l.launch "kda_decode"
// ON-SAME: block = array<i64: 256, 1, 1>, cluster = array<i64: 4, 1, 1>, grid = array<i64: 8, 1, 1>
// OFF-LABEL: func.func @heads_of_128
// OFF: k3l.launch "kda_decode"
// OFF-NOT: cluster
// OFF-SAME: grid = array<i64: 8, 1, 1>
func.func @heads_of_128(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x256xbf16>
  %x = k3.embed %tok, %table : tensor<16x256xbf16> -> tensor<256xbf16>
  %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 768, window = 3>
  %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 128, value_dim = 128>
  %cw = k3.weight "conv1d.weight" : tensor<256x1x4xbf16>
  %dt = k3.weight "dt_bias" : tensor<256xf32>
  %alog = k3.weight "A_log" : tensor<2xf32>
  %on = k3.weight "o_norm.weight" : tensor<128xbf16>
  %b = k3.weight "b" : tensor<2xbf16>
  %y = k3.kda_decode %x, %x, %x, %x, %b, %x, %cs, %s weights(%cw, %cw, %cw, %dt, %alog, %on)
          {config = #k3.kda<heads = 2, head_dim = 128, conv = 4>, eps = 1.0e-05 : f64}
          : (tensor<256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<2xbf16>, tensor<256xbf16>,
             !k3.conv_state<channels = 768, window = 3>, !k3.kda_state<heads = 2, key_dim = 128, value_dim = 128>,
             tensor<256x1x4xbf16>, tensor<256x1x4xbf16>, tensor<256x1x4xbf16>, tensor<256xf32>, tensor<2xf32>, tensor<128xbf16>) -> tensor<256xbf16>
  %head = k3.weight "head" : tensor<16x256xbf16>
  %logits = k3.linear %y, %head : (tensor<256xbf16>, tensor<16x256xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// A head of 64: no clusters either way.
// ON-LABEL: func.func @heads_of_64
// ON: k3l.launch "kda_decode"
// ON-NOT: cluster
// ON-SAME: grid = array<i64: 4, 1, 1>
// OFF-LABEL: func.func @heads_of_64
// OFF: k3l.launch "kda_decode"
// OFF-NOT: cluster
func.func @heads_of_64(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x128xbf16>
  %x = k3.embed %tok, %table : tensor<16x128xbf16> -> tensor<128xbf16>
  %cs = k3.state "layers.0.conv" : !k3.conv_state<channels = 384, window = 3>
  %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 64, value_dim = 64>
  %cw = k3.weight "conv1d.weight" : tensor<128x1x4xbf16>
  %dt = k3.weight "dt_bias" : tensor<128xf32>
  %alog = k3.weight "A_log" : tensor<2xf32>
  %on = k3.weight "o_norm.weight" : tensor<64xbf16>
  %b = k3.weight "b" : tensor<2xbf16>
  %y = k3.kda_decode %x, %x, %x, %x, %b, %x, %cs, %s weights(%cw, %cw, %cw, %dt, %alog, %on)
          {config = #k3.kda<heads = 2, head_dim = 64, conv = 4>, eps = 1.0e-05 : f64}
          : (tensor<128xbf16>, tensor<128xbf16>, tensor<128xbf16>, tensor<128xbf16>, tensor<2xbf16>, tensor<128xbf16>,
             !k3.conv_state<channels = 384, window = 3>, !k3.kda_state<heads = 2, key_dim = 64, value_dim = 64>,
             tensor<128x1x4xbf16>, tensor<128x1x4xbf16>, tensor<128x1x4xbf16>, tensor<128xf32>, tensor<2xf32>, tensor<64xbf16>) -> tensor<128xbf16>
  %head = k3.weight "head" : tensor<16x128xbf16>
  %logits = k3.linear %y, %head : (tensor<128xbf16>, tensor<16x128xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
