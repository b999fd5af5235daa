//===- K3Types.td - k3 state and weight types --------------*- tablegen -*-===//
#ifndef K3_TYPES_TD
#define K3_TYPES_TD

include "dialect/K3Dialect.td"

class K3_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<K3_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def K3_KdaStateType : K3_Type<"KdaState", "kda_state"> {
  let summary = "KDA recurrent state of one layer: heads x d_k x d_v, f32";
  let description = [{
    The fp32 delta-rule state of one KDA layer and one sequence, indexed
    [head][key][value]. It is read and written every token.

    ```mlir
    !k3.kda_state<heads = 96, key_dim = 128, value_dim = 128>
    ```
  }];
  let parameters = (ins "int64_t":$heads, "int64_t":$key_dim,
                        "int64_t":$value_dim);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes of the state (f32).
    int64_t getSizeInBytes() const { return getHeads() * getKeyDim() * getValueDim() * 4; }
  }];
}

def K3_ConvStateType : K3_Type<"ConvState", "conv_state"> {
  let summary = "short-conv state of one KDA layer: channels x (W-1), f32";
  let description = [{
    The last W-1 inputs of every depthwise-conv channel (q, k and v together:
    channels = 3·C).

    ```mlir
    !k3.conv_state<channels = 36864, window = 3>
    ```
  }];
  let parameters = (ins "int64_t":$channels, "int64_t":$window);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getSizeInBytes() const { return getChannels() * getWindow() * 4; }
  }];
}

def K3_MlaCacheType : K3_Type<"MlaCache", "mla_cache"> {
  let summary = "MLA latent KV cache of one layer: max_seq x (L+R), bf16";
  let description = [{
    One row per position: the normalised latent c (kv_lora_rank values) and
    the shared, never-rotated key part k_r (qk_rope_head_dim values).

    ```mlir
    !k3.mla_cache<max_seq = 4096, width = 576>
    ```
  }];
  let parameters = (ins "int64_t":$max_seq, "int64_t":$width);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getSizeInBytes() const { return getMaxSeq() * getWidth() * 2; }
  }];
}

def K3_AttnResBlocksType : K3_Type<"AttnResBlocks", "attn_res_blocks"> {
  let summary = "AttnRes committed block representations: max_blocks x D, bf16";
  let description = [{
    The block list B of K3.md §4 for one token: the representations committed
    at layers l with l % attn_res_block_size == 0, plus a count.

    ```mlir
    !k3.attn_res_blocks<max_blocks = 8, hidden = 7168>
    ```
  }];
  let parameters = (ins "int64_t":$max_blocks, "int64_t":$hidden);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getSizeInBytes() const { return getMaxBlocks() * getHidden() * 2; }
  }];
}

def K3_Mxfp4Type : K3_Type<"Mxfp4", "mxfp4"> {
  let summary = "an MXFP4 weight: E2M1 codes packed in pairs + E8M0 scales";
  let description = [{
    A weight of logical shape [..., out, in] stored as `weight_packed` u8
    [..., out, in/2] and `weight_scale` u8 [..., out, in/32]. A leading
    dimension stacks experts. `in` must be a multiple of 32.

    ```mlir
    !k3.mxfp4<16x128x128>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getRank() const { return getShape().size(); }
    int64_t getOut() const { return getShape()[getRank() - 2]; }
    int64_t getIn() const { return getShape().back(); }
    /// Packed codes + scales.
    int64_t getSizeInBytes() const;
  }];
}

def K3_VectorWeightType : K3_Type<"VectorWeight", "vector_weight"> {
  let summary = "a small weight stored bf16 or f32, as the checkpoint has it";
  let description = [{
    A weight the kernels read element by element in fp32 (a KDA short-conv
    filter [C, 1, W], the KDA o_norm weight [d]) whose stored dtype is not
    fixed by the config: the published K3 checkpoint stores these F32,
    Kimi-Linear BF16 (K3.md §10 "Stored dtypes"). The compiler never sees
    the checkpoint, so the dtype is chosen when the plan is bound (plan
    format `vector`, kernel field `VectorRef`): one plan binds both, and an
    F32 value is never rounded to bf16.

    ```mlir
    !k3.vector_weight<256x1x4>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def K3_StateType : AnyTypeOf<[K3_KdaStateType, K3_ConvStateType,
                              K3_MlaCacheType, K3_AttnResBlocksType]>;

#endif // K3_TYPES_TD
