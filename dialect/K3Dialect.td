//===- K3Dialect.td - The k3 dialect -----------------------*- tablegen -*-===//
//
// The k3 dialect models one decode step of a Kimi K3 style hybrid model:
// coarse ops, one per model part, and the fine-grained ops they decompose
// into. Tensors are per-token vectors of static shape (decode at batch 1);
// per-sequence caches are typed state handles that ops read and update.
//
//===----------------------------------------------------------------------===//
#ifndef K3_DIALECT_TD
#define K3_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def K3_Dialect : Dialect {
  let name = "k3";
  let summary = "Kimi K3 hybrid decode: KDA, gated NoPE MLA, latent MoE, AttnRes";
  let description = [{
    The `k3` dialect holds the decode step of a Kimi K3 / Kimi-Linear model as
    the compiler imports it from a `config.json`: weights are named checkpoint
    tensors (`k3.weight`), per-sequence caches are state handles (`k3.state`),
    and each model part is one coarse op (`k3.kda`, `k3.mla`, `k3.latent_moe`,
    ...). Passes decompose the coarse ops into fine-grained ones and fuse
    those back into the kernels the runtime launches.
  }];
  let cppNamespace = "::mlir::k3";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

/// Base class of every k3 op.
class K3_Op<string mnemonic, list<Trait> traits = []> :
    Op<K3_Dialect, mnemonic, traits>;

#endif // K3_DIALECT_TD
