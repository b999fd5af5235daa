// k3-prefetch-weights: a latency-bound launch (kda_decode, mla_attend,
// moe_ffn) asks L2 for the first large weight of the next launch that reads
// one; the weight's k3l.weight moves before it.
// RUN: k3-opt %s --k3-prefetch-weights | FileCheck %s
// RUN: k3-opt %s --k3-prefetch-weights=max-bytes=1000 | FileCheck %s --check-prefix=CAP
// RUN: k3-opt %s --k3-prefetch-weights=min-bytes=4194304 | FileCheck %s --check-prefix=NONE
// RUN: k3-opt %s --k3-prefetch-weights=kernels=mla_attend | FileCheck %s --check-prefix=NONE
// RUN: not k3-opt %s --k3-prefetch-weights=kernels=linear 2>&1 | FileCheck %s --check-prefix=BAD

// Before: kda_decode, an rms_norm of a small weight (under min-bytes), then
// o_proj (2 MiB), then a second large weight that nobody prefetches.
// CHECK-LABEL: func.func @decode_step
// CHECK: %[[W:.*]] = k3l.weight "model.layers.0.self_attn.o_proj.weight"
// CHECK-NEXT: k3l.launch "kda_decode"(%{{.*}}, %{{.*}}, %[[W]]) {arg_names = ["uq", "out", "l2Prefetch"], arg_offsets = array<i64: 0, 0, 0>
// CHECK-SAME: scalars = {headDim = 128 : i64, l2PrefetchBytes = 2097152 : i64, numHeads = 2 : i64}
// CHECK: k3l.weight "model.layers.0.self_attn.o_norm.weight"
// CHECK: k3l.launch "rms_norm"
// CHECK: k3l.launch "linear"(%{{.*}}, %[[W]], %{{.*}}) {arg_names = ["x", "w", "out"]
// CHECK: k3l.launch "linear"
// CHECK-SAME: arg_names = ["x", "w", "out"]

// The cap rounds down to whole 16-byte pieces.
// CAP: k3l.launch "kda_decode"
// CAP-SAME: l2PrefetchBytes = 992 : i64

// NONE-NOT: l2Prefetch

// BAD: k3-prefetch-weights: kernel 'linear' has no l2Prefetch field

func.func @decode_step() {
  %q = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "q"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  %n = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "n"} : !k3l.ptr
  %y = k3l.alloc {bytes = 2048 : i64, dtype = "bf16", elems = 1024 : i64, name = "y"} : !k3l.ptr
  %z = k3l.alloc {bytes = 2048 : i64, dtype = "bf16", elems = 1024 : i64, name = "z"} : !k3l.ptr
  k3l.launch "kda_decode" (%q, %o) {arg_names = ["uq", "out"], arg_offsets = array<i64: 0, 0>,
      scalars = {numHeads = 2 : i64, headDim = 128 : i64}, inputs = {}, grid = array<i64: 8, 1, 1>,
      block = array<i64: 256, 1, 1>, smem = 0 : i64, op = "k3.kda_decode"} : !k3l.ptr, !k3l.ptr
  %g = k3l.weight "model.layers.0.self_attn.o_norm.weight" {format = "bf16", shape = array<i64: 256>} : !k3l.ptr
  k3l.launch "rms_norm" (%o, %g, %n) {arg_names = ["x", "w", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64, eps = 1.0e-05 : f64}, inputs = {}, grid = array<i64: 1, 1, 1>,
      block = array<i64: 256, 1, 1>, smem = 0 : i64, op = "k3.rms_norm"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  %w = k3l.weight "model.layers.0.self_attn.o_proj.weight" {format = "bf16", shape = array<i64: 1024, 1024>} : !k3l.ptr
  k3l.launch "linear" (%n, %w, %y) {arg_names = ["x", "w", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 1024 : i64, k = 256 : i64}, inputs = {}, grid = array<i64: 64, 1, 1>,
      block = array<i64: 256, 1, 1>, smem = 0 : i64, op = "k3.linear"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  %w2 = k3l.weight "model.layers.0.mlp.up_proj.weight" {format = "bf16", shape = array<i64: 1024, 1024>} : !k3l.ptr
  k3l.launch "linear" (%y, %w2, %z) {arg_names = ["x", "w", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 1024 : i64, k = 1024 : i64}, inputs = {}, grid = array<i64: 64, 1, 1>,
      block = array<i64: 256, 1, 1>, smem = 0 : i64, op = "k3.linear"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}
