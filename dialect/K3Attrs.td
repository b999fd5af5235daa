//===- K3Attrs.td - k3 layer configuration attributes ------*- tablegen -*-===//
#ifndef K3_ATTRS_TD
#define K3_ATTRS_TD

include "dialect/K3Dialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

class K3_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<K3_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def K3_Activation : I32EnumAttr<"Activation", "gated MLP activation", [
    I32EnumAttrCase<"situ", 0>, I32EnumAttrCase<"silu", 1>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::k3";
}
def K3_ActivationAttr : EnumAttr<K3_Dialect, K3_Activation, "activation"> {
  let summary = "SiTU (softcapped, K3) or SiLU (SwiGLU, Kimi-Linear)";
}

def K3_KdaConfigAttr : K3_Attr<"KdaConfig", "kda"> {
  let summary = "geometry of a KDA layer";
  let description = [{
    ```mlir
    #k3.kda<heads = 96, head_dim = 128, conv = 4, full_rank_gate = true, lower_bound = -5.0>
    ```
    Without `lower_bound` the decay gate is the softplus form of K3.md §2.5.
    Without `full_rank_gate` the output gate is low rank (g_a, g_b).
  }];
  let parameters = (ins "int64_t":$heads, "int64_t":$head_dim, "int64_t":$conv,
                        DefaultValuedParameter<"bool", "false">:$full_rank_gate,
                        OptionalParameter<"::mlir::FloatAttr">:$lower_bound);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getChannels() const { return getHeads() * getHeadDim(); }
  }];
}

def K3_MlaConfigAttr : K3_Attr<"MlaConfig", "mla"> {
  let summary = "geometry of a gated NoPE MLA layer";
  let description = [{
    ```mlir
    #k3.mla<heads = 96, q_lora = 1536, kv_lora = 512, nope = 128, rope = 64, v_dim = 128, output_gate = true>
    ```
    `q_lora = 0` means a direct `q_proj`.
  }];
  let parameters = (ins "int64_t":$heads, "int64_t":$q_lora, "int64_t":$kv_lora,
                        "int64_t":$nope, "int64_t":$rope, "int64_t":$v_dim,
                        DefaultValuedParameter<"bool", "false">:$output_gate);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getQWidth() const { return getHeads() * (getNope() + getRope()); }
    int64_t getCacheWidth() const { return getKvLora() + getRope(); }
    int64_t getKvBWidth() const { return getHeads() * (getNope() + getVDim()); }
    int64_t getOWidth() const { return getHeads() * getVDim(); }
  }];
}

def K3_MoeConfigAttr : K3_Attr<"MoeConfig", "moe"> {
  let summary = "router and expert configuration of a MoE layer";
  let description = [{
    ```mlir
    #k3.moe<experts = 896, top_k = 16, intermediate = 3072, shared = 2, renormalize = true, scaling = 1.0>
    ```
  }];
  let parameters = (ins "int64_t":$experts, "int64_t":$top_k,
                        "int64_t":$intermediate, "int64_t":$shared,
                        DefaultValuedParameter<"bool", "true">:$renormalize,
                        "::mlir::FloatAttr":$scaling);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def K3_SplitAttr : K3_Attr<"Split", "split"> {
  let summary = "one rank's equal part of a checkpoint tensor";
  let description = [{
    Part `rank` of `ranks` equal parts along dimension `axis` of the logical
    shape (a stacked `{e}` weight counts the expert dimension as 0). The
    weight's type is the part's shape; the runtime reads only that part of
    the checkpoint tensor (runtime/io/TensorSlice.h). Placed by
    `k3-partition-ranks`.
    ```mlir
    %o = k3.weight "model.layers.0.self_attn.o_proj.weight"
           {split = #k3.split<axis = 1, rank = 0, ranks = 2>} : tensor<256x128xbf16>
    ```
  }];
  let parameters = (ins "int64_t":$axis, "int64_t":$rank, "int64_t":$ranks);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // K3_ATTRS_TD
