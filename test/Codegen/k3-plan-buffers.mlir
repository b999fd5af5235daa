// k3-plan-buffers places every k3l.alloc in one arena: buffers whose live
// ranges (first to last launch that touches them) overlap never share bytes,
// dead ones are reused, and the logits buffer stays live to the end.
// RUN: k3-opt %s --k3-plan-buffers | FileCheck %s
// RUN: k3-opt %s --k3-plan-buffers=reuse=false | FileCheck %s --check-prefix=NOREUSE
// RUN: k3-opt %s --k3-plan-buffers=alignment=1024 | FileCheck %s --check-prefix=ALIGN
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-plan-buffers{alignment=64})' | FileCheck %s --check-prefix=ALIGN64
// RUN: not k3-opt %s --k3-plan-buffers=alignment=48 2>&1 | FileCheck %s --check-prefix=BADALIGN

// Live ranges: a [0, 0], b [0, 1], c [1, 2], d [2, end] (logits); e is never
// used, so it conflicts with everything. Largest first, first fit:
// a at 0; b overlaps a; c is dead-disjoint from a and takes its place; d
// likewise takes b's; e (100 bytes, 256 aligned) goes after all.
// CHECK: module attributes {k3l.arena_bytes = 1280 : i64}
// CHECK-LABEL: func.func @decode_step
// CHECK: k3l.alloc {{{.*}}name = "a", offset = 0 : i64}
// CHECK: k3l.alloc {{{.*}}name = "b", offset = 512 : i64}
// CHECK: k3l.alloc {{{.*}}name = "c", offset = 0 : i64}
// CHECK: k3l.alloc {{{.*}}name = "d", offset = 512 : i64}
// CHECK: k3l.alloc {{{.*}}name = "e", offset = 1024 : i64}

// Without reuse every buffer has its own slot.
// NOREUSE: module attributes {k3l.arena_bytes = 2304 : i64}
// NOREUSE-DAG: k3l.alloc {{{.*}}name = "a", offset = 0 : i64}
// NOREUSE-DAG: k3l.alloc {{{.*}}name = "b", offset = 512 : i64}
// NOREUSE-DAG: k3l.alloc {{{.*}}name = "c", offset = 1024 : i64}
// NOREUSE-DAG: k3l.alloc {{{.*}}name = "d", offset = 1536 : i64}
// NOREUSE-DAG: k3l.alloc {{{.*}}name = "e", offset = 2048 : i64}

// Every buffer is rounded up to the alignment.
// ALIGN: module attributes {k3l.arena_bytes = 3072 : i64}
// ALIGN: k3l.alloc {{{.*}}name = "a", offset = 0 : i64}
// ALIGN: k3l.alloc {{{.*}}name = "b", offset = 1024 : i64}
// ALIGN: k3l.alloc {{{.*}}name = "c", offset = 0 : i64}
// ALIGN: k3l.alloc {{{.*}}name = "d", offset = 1024 : i64}
// ALIGN: k3l.alloc {{{.*}}name = "e", offset = 2048 : i64}

// ALIGN64: module attributes {k3l.arena_bytes = 1152 : i64}
// ALIGN64: k3l.alloc {{{.*}}name = "e", offset = 1024 : i64}

// BADALIGN: error: k3-plan-buffers: alignment must be a power of two, got 48
func.func @decode_step(%tok: i32, %pos: index) {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %c = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "c"} : !k3l.ptr
  %d = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "d"} : !k3l.ptr
  %e = k3l.alloc {bytes = 100 : i64, dtype = "bf16", elems = 50 : i64, name = "e"} : !k3l.ptr
  k3l.launch "add" (%a, %a, %b) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  k3l.launch "add" (%b, %b, %c) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  k3l.launch "add" (%c, %c, %d) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  k3l.logits %d : !k3l.ptr
  return
}
