// RUN: k3-opt %s -split-input-file -verify-diagnostics -k3-inject-mutant="kind=skip-layer layer=1"

// Only layer 0 exists.
// expected-error @below {{skip-layer layer 1 is out of range (the function has 1 layers}}
func.func @one_layer(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
         loc("model.layers.0.mlp.dense_mlp")
  %y = k3.add %x, %d : tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// An AttnRes commit layer: the sublayer output is p itself, no residual add.
// expected-error @below {{k3.dense_mlp of layer 1 feeds no residual add (an AttnRes commit layer, where p = a}}
func.func @commit_layer(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %d0 = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
         loc("model.layers.0.mlp.dense_mlp")
  %d1 = k3.dense_mlp %d0, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
         loc("model.layers.1.mlp.dense_mlp")
  return %d1 : tensor<8xbf16>
}

// -----

// Layer 1 exists, layer 0 has no sublayer at all.
// expected-error @below {{skip-layer: layer 1 has no residual adds}}
func.func @no_layer_zero(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %d = k3.dense_mlp %x, %w1, %w1, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
         loc("model.layers.2.mlp.dense_mlp")
  %y = k3.add %x, %d : tensor<8xbf16>
  return %y : tensor<8xbf16>
}
