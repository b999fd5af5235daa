// One case per verifier message of the k3l dialect (codegen/LaunchDialect.cpp).
// RUN: k3-opt %s -split-input-file -verify-diagnostics

func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{'k3l.launch' op expects a kernel of the k3c library but got 'no_such_kernel'}}
  k3l.launch "no_such_kernel" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects one name and one offset per pointer argument but got 3 arguments, 2 names, 3 offsets}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects one name and one offset per pointer argument but got 3 arguments, 3 names, 1 offsets}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 'n' to be a pointer field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "n"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 'bogus' to be a pointer field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "bogus"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{binds 'b' at byte 512 outside its 512-byte allocation}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 512, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{binds 'a' at byte -4 outside its 512-byte allocation}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: -4, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 'out' to be a scalar field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64, out = 1 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 'count' to be a scalar field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {count = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects scalar 'n' to be an integer or a float}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = "256"}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects input 'n' to bind an int64 pointer field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {n = "step"}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects input 'n' to be token, pos, length or step}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {n = 3 : i64}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects input 'a' to bind a scalar field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {a = "pos"}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects input 'len' to bind a scalar field of add's params}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {len = "length"}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 3-D grid and block}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects positive grid and block dimensions}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 0, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects positive grid and block dimensions}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, -1, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects at most 1024 threads per block but got 2048}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 8, 1>,
      smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects shared memory in [0, 232448] bytes but got 232449}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 232449 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.alloc' op expects a positive size but got 0}}
  %p = k3l.alloc {bytes = 0 : i64, dtype = "bf16", elems = 1 : i64, name = "p"} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.alloc' op expects a positive element count but got 0}}
  %p = k3l.alloc {bytes = 2 : i64, dtype = "bf16", elems = 0 : i64, name = "p"} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.weight' op expects format bf16, f32, vector or mxfp4 but got 'fp8'}}
  %w = k3l.weight "w" {format = "fp8", shape = array<i64: 4, 4>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.weight' op expects a non-empty shape}}
  %w = k3l.weight "w" {format = "bf16", shape = array<i64>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.state' op expects a known state kind but got 'kv_cache'}}
  %s = k3l.state "layers.0.kv" {kind = "kv_cache", bytes = 64 : i64, shape = array<i64: 4, 4>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.state' op expects a positive size but got 0}}
  %s = k3l.state "layers.0.kda" {kind = "kda_state", bytes = 0 : i64, shape = array<i64: 4, 64, 64>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  %s = k3l.state "layers.0.conv" {kind = "conv_state", bytes = 1152 : i64, shape = array<i64: 96, 3>} : !k3l.ptr
  %w = k3l.weight "k_conv1d.weight" {format = "bf16", shape = array<i64: 32, 1, 4>} : !k3l.ptr
  %u = k3l.alloc {bytes = 64 : i64, dtype = "bf16", elems = 32 : i64, name = "u"} : !k3l.ptr
  // expected-error @+1 {{binds 'state' at byte 1152 outside its 1152-byte allocation}}
  k3l.launch "kda_conv" (%u, %w, %s, %u) {arg_names = ["u", "weight", "state", "out"], arg_offsets = array<i64: 0, 0, 1152, 0>,
      scalars = {channels = 32 : i64, width = 4 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.conv_step"} : !k3l.ptr, !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects a 3-D cluster}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 4, 1, 1>, block = array<i64: 256, 1, 1>,
      cluster = array<i64: 4>, smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects cluster dimension 0 to divide the grid's (6) but got 4}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 6, 1, 1>, block = array<i64: 256, 1, 1>,
      cluster = array<i64: 4, 1, 1>, smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "b"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects at most 8 blocks per cluster but got 16}}
  k3l.launch "add" (%a, %b, %o) {arg_names = ["a", "b", "out"], arg_offsets = array<i64: 0, 0, 0>,
      scalars = {n = 256 : i64}, inputs = {}, grid = array<i64: 16, 1, 1>, block = array<i64: 256, 1, 1>,
      cluster = array<i64: 16, 1, 1>, smem = 0 : i64, op = "k3.add"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %o = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "o"} : !k3l.ptr
  // expected-error @+1 {{expects 'l2Prefetch' (an L2 prefetch) to be a bf16 or f32 k3l.weight of one matrix}}
  k3l.launch "kda_decode" (%a, %o) {arg_names = ["uq", "l2Prefetch"], arg_offsets = array<i64: 0, 0>,
      scalars = {l2PrefetchBytes = 512 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.kda_decode"} : !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %w = k3l.weight "model.layers.0.mlp.experts.{e}.w1.weight" {format = "bf16", shape = array<i64: 4, 64, 64>} : !k3l.ptr
  // expected-error @+1 {{expects 'l2Prefetch' (an L2 prefetch) to be a bf16 or f32 k3l.weight of one matrix}}
  k3l.launch "kda_decode" (%a, %w) {arg_names = ["uq", "l2Prefetch"], arg_offsets = array<i64: 0, 0>,
      scalars = {l2PrefetchBytes = 512 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.kda_decode"} : !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %w = k3l.weight "model.layers.0.self_attn.o_proj.weight" {format = "bf16", shape = array<i64: 64, 64>} : !k3l.ptr
  // expected-error @+1 {{expects the offset of 'l2Prefetch' to be a multiple of 16 but got 8}}
  k3l.launch "kda_decode" (%a, %w) {arg_names = ["uq", "l2Prefetch"], arg_offsets = array<i64: 0, 8>,
      scalars = {l2PrefetchBytes = 512 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.kda_decode"} : !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  %a = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "a"} : !k3l.ptr
  %w = k3l.weight "model.layers.0.self_attn.o_proj.weight" {format = "bf16", shape = array<i64: 64, 64>} : !k3l.ptr
  // expected-error @+1 {{expects l2PrefetchBytes to be a non-negative multiple of 16}}
  k3l.launch "kda_decode" (%a, %w) {arg_names = ["uq", "l2Prefetch"], arg_offsets = array<i64: 0, 0>,
      scalars = {l2PrefetchBytes = 8 : i64}, inputs = {}, grid = array<i64: 1, 1, 1>, block = array<i64: 256, 1, 1>,
      smem = 0 : i64, op = "k3.kda_decode"} : !k3l.ptr, !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.weight' op expects split = [axis, rank, ranks] but got 2 values}}
  %w = k3l.weight "w" {format = "bf16", shape = array<i64: 8, 4>, split = array<i64: 0, 1>} : !k3l.ptr
  return
}

// -----
func.func @f() {
  // expected-error @+1 {{'k3l.weight' op expects a split axis inside the shape and 0 <= rank < ranks but got axis 2, rank 0, ranks 2}}
  %w = k3l.weight "w" {format = "bf16", shape = array<i64: 8, 4>, split = array<i64: 2, 0, 2>} : !k3l.ptr
  return
}
