// Negative sizes, counts, offsets and shared memory are refused by the k3l
// verifiers (they read the I64 attributes signed).
// RUN: k3-opt %s -split-input-file -verify-diagnostics

func.func @f() {
  // expected-error @+1 {{'k3l.alloc' op expects a positive size but got -4}}
  %p = k3l.alloc {bytes = -4 : i64, dtype = "bf16", elems = 1 : i64, name = "p"} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.alloc' op expects a positive element count but got -2}}
  %p = k3l.alloc {bytes = 4 : i64, dtype = "bf16", elems = -2 : i64, name = "p"} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.alloc' op expects a non-negative offset but got -256}}
  %p = k3l.alloc {bytes = 4 : i64, dtype = "bf16", elems = 2 : i64, name = "p", offset = -256 : i64} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.state' op expects a positive size but got -64}}
  %s = k3l.state "layers.0.kda" {kind = "kda_state", bytes = -64 : i64, shape = array<i64: 4, 64, 64>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  // expected-error @+1 {{expects shared memory in [0, 232448] bytes but got -1}}
  k3l.launch "add" (%a, %a, %a) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = -1 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}
