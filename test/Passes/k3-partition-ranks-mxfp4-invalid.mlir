// RUN: k3-opt %s -k3-partition-ranks="ranks=2 rank=0" -verify-diagnostics

// An MXFP4 w2 whose 32 inputs split into parts of 16: not whole 32-value
// blocks (one E8M0 scale each), so no rank could own its part of a scale.
module {
  func.func @decode_step(%h: tensor<64xbf16>) -> tensor<64xbf16> {
    %w1 = k3.weight "w1" : !k3.mxfp4<32x64>
    %w3 = k3.weight "w3" : !k3.mxfp4<32x64>
    %w2 = k3.weight "w2" : !k3.mxfp4<64x32>
    // expected-error @+1 {{'k3.dense_mlp' op cannot be split over 2 ranks: its MXFP4 mlp w2 inputs has 32 inputs, 16 per rank, not whole blocks of 32}}
    %m = k3.dense_mlp %h, %w1, %w3, %w2 {act = #k3<activation silu>}
           : (tensor<64xbf16>, !k3.mxfp4<32x64>, !k3.mxfp4<32x64>, !k3.mxfp4<64x32>) -> tensor<64xbf16>
    return %m : tensor<64xbf16>
  }
}
