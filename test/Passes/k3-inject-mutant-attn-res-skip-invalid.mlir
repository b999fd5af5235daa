// attn-res-skip needs unfused k3.attn_res ops.
// RUN: k3-opt %s -split-input-file -verify-diagnostics -k3-inject-mutant=kind=attn-res-skip

// expected-error @below {{attn-res-skip needs k3.attn_res ops, the function has none}}
func.func @no_attn_res(%x: tensor<8xbf16>) -> tensor<8xbf16> {
  %y = k3.add %x, %x : tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

func.func @fused(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %a: tensor<8xbf16>,
                 %w8: tensor<8xbf16>, %proj: tensor<1x8xbf16>) -> tensor<8xbf16> {
  // expected-error @below {{attn-res-skip runs on the coarse IR, before k3-fuse-attn-res}}
  %h = k3.attn_res %blocks, %a, %w8, %proj then_norm(%w8) {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  return %h : tensor<8xbf16>
}
