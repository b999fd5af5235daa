// router-expert0 needs routers: decomposed (k3.router) or fused
// (k3.routed_experts); a coarse k3.moe has neither yet.
// RUN: k3-opt %s -verify-diagnostics -k3-inject-mutant=kind=router-expert0

// expected-error @below {{router-expert0 found no k3.router, k3.routed_experts or k3.moe_ffn; run it after k3-decompose-layers on a model with MoE layers}}
func.func @dense_only(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %d : tensor<8xbf16>
}
