// convert-k3-to-launch's gemv-ring option: a linear or linear_group whose
// weights are all bf16, with k % 8 == 0 and k <= 12288, gets the dynamic
// shared memory of the CUDA GEMV's weight ring (48 KiB at 256 threads:
// kernels/gemv/GemvParams.h) and a grid of at most three blocks per SM of
// the target (396), its warps striding over the rows. MXFP4 weights, a
// k over 12288 or k % 8 != 0, and the option off keep gemvGrid and no
// dynamic shared memory (the register path).
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch | FileCheck %s --check-prefix=ON
// RUN: k3-opt %s -split-input-file --convert-k3-to-launch="gemv-ring=false" | FileCheck %s --check-prefix=OFF

// Before:
//   %y = k3.linear %x, %w : (tensor<2304xbf16>, tensor<8192x2304xbf16>) -> tensor<8192xbf16>
// After (on):
//   k3l.launch "linear"(...) {..., grid = array<i64: 396, 1, 1>, ..., smem = 49152 : i64}
// After (off):
//   k3l.launch "linear"(...) {..., grid = array<i64: 1024, 1, 1>, ..., smem = 0 : i64}
// ON-LABEL: func.func @bf16_projection
// ON: k3l.launch "linear"
// ON-SAME: grid = array<i64: 396, 1, 1>
// ON-SAME: smem = 49152 : i64
// A short matrix keeps gemvGrid's two blocks per SM (264 < 396).
// ON: k3l.launch "linear"
// ON-SAME: grid = array<i64: 264, 1, 1>
// ON-SAME: smem = 49152 : i64
// OFF-LABEL: func.func @bf16_projection
// OFF: k3l.launch "linear"
// OFF-SAME: grid = array<i64: 1024, 1, 1>
// OFF-SAME: smem = 0 : i64
// OFF: k3l.launch "linear"
// OFF-SAME: grid = array<i64: 264, 1, 1>
// OFF-SAME: smem = 0 : i64
func.func @bf16_projection(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x2304xbf16>
  %x = k3.embed %tok, %table : tensor<16x2304xbf16> -> tensor<2304xbf16>
  %w = k3.weight "proj.weight" : tensor<8192x2304xbf16>
  %y = k3.linear %x, %w : (tensor<2304xbf16>, tensor<8192x2304xbf16>) -> tensor<8192xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x8192xbf16>
  %logits = k3.linear %y, %head : (tensor<8192xbf16>, tensor<16x8192xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// A group of bf16 entries takes the ring over all its rows; one MXFP4 entry
// (which the ring cannot read) leaves the whole launch on the register path.
// ON-LABEL: func.func @groups
// ON: k3l.launch "linear_multi"
// ON-SAME: grid = array<i64: 396, 1, 1>
// ON-SAME: smem = 49152 : i64
// ON: k3l.launch "linear_multi"
// ON-SAME: grid = array<i64: 1032, 1, 1>
// ON-SAME: smem = 0 : i64
// OFF-LABEL: func.func @groups
// OFF: k3l.launch "linear_multi"
// OFF-SAME: grid = array<i64: 1032, 1, 1>
// OFF-SAME: smem = 0 : i64
func.func @groups(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x2304xbf16>
  %x = k3.embed %tok, %table : tensor<16x2304xbf16> -> tensor<2304xbf16>
  %wq = k3.weight "q_proj.weight" : tensor<8192x2304xbf16>
  %wb = k3.weight "b_proj.weight" : tensor<64x2304xbf16>
  %q, %b = k3.linear_group %x, %wq, %wb
             : (tensor<2304xbf16>, tensor<8192x2304xbf16>, tensor<64x2304xbf16>) -> (tensor<8192xbf16>, tensor<64xbf16>)
  %wk = k3.weight "k_proj" : !k3.mxfp4<64x2304>
  %k, %q2 = k3.linear_group %x, %wk, %wq
              : (tensor<2304xbf16>, !k3.mxfp4<64x2304>, tensor<8192x2304xbf16>) -> (tensor<64xbf16>, tensor<8192xbf16>)
  %s = k3.add %q, %q2 : tensor<8192xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x8192xbf16>
  %logits = k3.linear %s, %head : (tensor<8192xbf16>, tensor<16x8192xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}

// -----

// k over the staged chunk (12288), or not a multiple of 8: no ring.
// ON-LABEL: func.func @wide_and_odd
// ON: k3l.launch "linear"
// ON-SAME: grid = array<i64: 264, 1, 1>
// ON-SAME: smem = 0 : i64
// ON: k3l.launch "linear"
// ON-SAME: grid = array<i64: 264, 1, 1>
// ON-SAME: smem = 0 : i64
func.func @wide_and_odd(%tok: i32, %pos: index) -> tensor<16xf32> {
  %table = k3.weight "embed" : tensor<16x20000xbf16>
  %x = k3.embed %tok, %table : tensor<16x20000xbf16> -> tensor<20000xbf16>
  %w = k3.weight "down.weight" : tensor<100x20000xbf16>
  %y = k3.linear %x, %w : (tensor<20000xbf16>, tensor<100x20000xbf16>) -> tensor<100xbf16>
  %head = k3.weight "lm_head.weight" : tensor<16x100xbf16>
  %logits = k3.linear %y, %head : (tensor<100xbf16>, tensor<16x100xbf16>) -> tensor<16xf32>
  return %logits : tensor<16xf32>
}
