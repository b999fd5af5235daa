//===- LaunchDialect.td - The k3l launch-level dialect -----*- tablegen -*-===//
//
// What the runtime executes: scratch allocations, checkpoint weights and
// resident state as opaque pointers, and kernel launches with their grid,
// block, shared memory and argument bindings. `convert-k3-to-launch` makes
// it from fused k3 IR; `k3-plan-buffers` places the allocations in one arena;
// the plan emitter serialises it (docs/PLAN.md).
//
//===----------------------------------------------------------------------===//
#ifndef K3L_DIALECT_TD
#define K3L_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def K3L_Dialect : Dialect {
  let name = "k3l";
  let summary = "kernel launches of a k3 decode step";
  let description = [{
    The launch-level form of a decode step: every value is a pointer into a
    scratch buffer, a checkpoint weight or a resident state slot, and every
    op that computes is a `k3l.launch` of a named kernel of the k3c kernel
    library (docs/PLAN.md lists them with their params structs).
  }];
  let cppNamespace = "::mlir::k3l";
  let useDefaultTypePrinterParser = 1;
}

class K3L_Op<string mnemonic, list<Trait> traits = []> :
    Op<K3L_Dialect, mnemonic, traits>;

def K3L_PtrType : TypeDef<K3L_Dialect, "Ptr"> {
  let mnemonic = "ptr";
  let summary = "a device or host pointer bound by the runtime";
}

def K3L_AllocOp : K3L_Op<"alloc", [Pure]> {
  let summary = "a per-step scratch buffer";
  let description = [{
    `bytes` of scratch holding `elems` values of `dtype`. `k3-plan-buffers`
    sets `offset`, its place in the step's arena.
    ```mlir
    %b = k3l.alloc {bytes = 512 : i64, dtype = "bf16", elems = 256 : i64, name = "h"} : !k3l.ptr
    ```
  }];
  let arguments = (ins I64Attr:$bytes, StrAttr:$dtype, I64Attr:$elems,
                       StrAttr:$name, OptionalAttr<I64Attr>:$offset);
  let results = (outs K3L_PtrType:$ptr);
  let assemblyFormat = "attr-dict `:` type($ptr)";
  let hasVerifier = 1;
}

def K3L_WeightOp : K3L_Op<"weight", [Pure]> {
  let summary = "a checkpoint tensor by name";
  let description = [{
    `format` is the plan's (docs/PLAN.md "weights"): `bf16`, `f32`, `mxfp4`,
    or `vector` for a small weight bound in the dtype the checkpoint stores
    (bf16 or f32: the KDA conv filters and o_norm).
    ```mlir
    %w = k3l.weight "model.layers.0.mlp.gate_proj.weight" {format = "bf16", shape = array<i64: 512, 256>} : !k3l.ptr
    %c = k3l.weight "model.layers.0.self_attn.q_conv1d.weight" {format = "vector", shape = array<i64: 256, 1, 4>} : !k3l.ptr
    ```
    `split = array<i64: axis, rank, ranks>` (a tensor-parallel plan): `shape`
    is rank `rank`'s part of the checkpoint tensor along `axis`.
  }];
  let arguments = (ins StrAttr:$name, StrAttr:$format,
                       DenseI64ArrayAttr:$shape,
                       OptionalAttr<DenseI64ArrayAttr>:$split);
  let results = (outs K3L_PtrType:$ptr);
  let assemblyFormat = "$name attr-dict `:` type($ptr)";
  let hasVerifier = 1;
}

def K3L_StateOp : K3L_Op<"state", [Pure]> {
  let summary = "a resident per-sequence state slot";
  let description = [{
    ```mlir
    %s = k3l.state "layers.0.kda" {kind = "kda_state", bytes = 65536 : i64, shape = array<i64: 4, 64, 64>} : !k3l.ptr
    ```
  }];
  let arguments = (ins StrAttr:$slot, StrAttr:$kind, I64Attr:$bytes,
                       DenseI64ArrayAttr:$shape);
  let results = (outs K3L_PtrType:$ptr);
  let assemblyFormat = "$slot attr-dict `:` type($ptr)";
  let hasVerifier = 1;
}

def K3L_LaunchOp : K3L_Op<"launch"> {
  let summary = "one kernel launch with its argument bindings";
  let description = [{
    Pointer arguments are operands, named by `arg_names` (fields of the
    kernel's params struct) with a byte offset each in `arg_offsets`;
    `scalars` binds numeric fields; `inputs` binds fields to the step's
    `token`, `pos` or `length` (= pos + 1). `op` names the k3 op the launch
    came from. The verifier checks every name against the kernel's params
    struct and that each offset lies inside the bound allocation.
    ```mlir
    k3l.launch "rms_norm" (%x, %w, %y) {arg_names = ["x", "w", "out"], arg_offsets = array<i64: 0, 0, 0>,
        scalars = {n = 256 : i64, eps = 1.0e-05 : f64}, inputs = {}, grid = array<i64: 1, 1, 1>,
        block = array<i64: 256, 1, 1>, smem = 0 : i64, op = "k3.rms_norm"} : !k3l.ptr, !k3l.ptr, !k3l.ptr
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<K3L_PtrType>:$args,
                       StrArrayAttr:$arg_names, DenseI64ArrayAttr:$arg_offsets,
                       DictionaryAttr:$scalars, DictionaryAttr:$inputs,
                       DenseI64ArrayAttr:$grid, DenseI64ArrayAttr:$block,
                       I64Attr:$smem, StrAttr:$op,
                       OptionalAttr<DenseI64ArrayAttr>:$cluster);
  let assemblyFormat = "$kernel `(` $args `)` attr-dict `:` type($args)";
  let hasVerifier = 1;
}

def K3L_ProbeOp : K3L_Op<"probe"> {
  let summary = "names the buffer that holds a probed value";
  let description = [{
    The lowering of `k3.probe`: after the launches before it in the step,
    `ptr` holds the value named `name`. The plan lists it as a probe
    (docs/PLAN.md); it is not a launch and costs nothing at run time.
    ```mlir
    k3l.probe %b {name = "layers.0.out"} : !k3l.ptr
    ```
  }];
  let arguments = (ins K3L_PtrType:$ptr, StrAttr:$name);
  let assemblyFormat = "$ptr attr-dict `:` type($ptr)";
}

def K3L_LogitsOp : K3L_Op<"logits"> {
  let summary = "marks the buffer that holds the step's fp32 logits";
  let description = [{
    ```mlir
    k3l.logits %l : !k3l.ptr
    ```
  }];
  let arguments = (ins K3L_PtrType:$ptr);
  let assemblyFormat = "$ptr attr-dict `:` type($ptr)";
}

#endif // K3L_DIALECT_TD
