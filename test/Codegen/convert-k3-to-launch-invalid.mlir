// convert-k3-to-launch refuses ops it has no kernels for (coarse ops must go
// through the fusion pipeline first) and a step that returns no logits.
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch -verify-diagnostics

func.func @decode_step(%tok: i32, %pos: index) -> tensor<64xf32> {
  %table = k3.weight "embed.weight" : tensor<64x32xbf16>
  %x = k3.embed %tok, %table : tensor<64x32xbf16> -> tensor<32xbf16>
  %head = k3.weight "lm_head.weight" : tensor<64x32xbf16>
  // expected-error @+1 {{'k3.lm_head' op has no lowering to kernel launches: run the k3 fusion pipeline (decompose at least) first}}
  %logits = k3.lm_head %x, %head : tensor<32xbf16>, tensor<64x32xbf16> -> tensor<64xf32>
  return %logits : tensor<64xf32>
}

// -----
func.func @decode_step(%tok: i32, %pos: index) -> tensor<8xbf16> {
  %table = k3.weight "embed.weight" : tensor<16x8xbf16>
  %x = k3.embed %tok, %table : tensor<16x8xbf16> -> tensor<8xbf16>
  %conv = k3.state "layers.0.conv" : !k3.conv_state<channels = 24, window = 3>
  %s = k3.state "layers.0.kda" : !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>
  %m88 = k3.weight "m88" : tensor<8x8xbf16>
  %cw = k3.weight "cw" : tensor<8x1x4xbf16>
  %m48 = k3.weight "m48" : tensor<4x8xbf16>
  %m84 = k3.weight "m84" : tensor<8x4xbf16>
  %f8 = k3.weight "f8" : tensor<8xf32>
  %alog = k3.weight "alog" : tensor<2xf32>
  %m28 = k3.weight "m28" : tensor<2x8xbf16>
  %w4 = k3.weight "w4" : tensor<4xbf16>
  // expected-error @+1 {{'k3.kda' op has no lowering to kernel launches}}
  %a = k3.kda %x, %conv, %s weights(%m88, %m88, %m88, %cw, %cw, %cw, %m48, %m84, %f8, %alog, %m28, %w4, %m88)
         gate(%m88) {config = #k3.kda<heads = 2, head_dim = 4, conv = 4, full_rank_gate = true, lower_bound = -5.0>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 3>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>, tensor<8x1x4xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return %a : tensor<8xbf16>
}

// -----
func.func @decode_step(%tok: i32, %pos: index) {
  %table = k3.weight "embed.weight" : tensor<64x32xbf16>
  %x = k3.embed %tok, %table : tensor<64x32xbf16> -> tensor<32xbf16>
  // expected-error @+1 {{'func.return' op expects the decode step to return logits}}
  return
}
