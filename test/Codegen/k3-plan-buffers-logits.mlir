// The logits buffer is live to the end of the step: a buffer first used after
// the logits' last launch must not take their place.
// RUN: k3-opt %s --k3-plan-buffers | FileCheck %s

// x [0, 0], logits [0, end], late and y [1, 1]: late reuses x's bytes, but y
// may not take the logits' (it would, were the logits dead after launch 0).
// CHECK: module attributes {k3l.arena_bytes = 1536 : i64}
// CHECK-LABEL: func.func @decode_step
// CHECK: k3l.alloc {{{.*}}name = "x", offset = 0 : i64}
// CHECK: k3l.alloc {{{.*}}name = "logits", offset = 512 : i64}
// CHECK: k3l.alloc {{{.*}}name = "late", offset = 0 : i64}
// CHECK: k3l.alloc {{{.*}}name = "y", offset = 1024 : i64}
func.func @decode_step(%tok: i32, %pos: index) {
  %x = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "x"} : !k3l.ptr
  %l = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "logits"} : !k3l.ptr
  %late = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "late"} : !k3l.ptr
  %y = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "y"} : !k3l.ptr
  k3l.launch "add" (%x, %x, %l) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  k3l.launch "add" (%y, %y, %late) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  k3l.logits %l : !k3l.ptr
  return
}
