// RUN: k3-opt %s -split-input-file -k3-partition-ranks="ranks=3 rank=0" -verify-diagnostics

// Two heads do not split over three ranks.
module {
  func.func @decode_step(%h: tensor<8xbf16>, %pos: index) -> tensor<8xbf16> {
    %wq = k3.weight "q_proj.weight" : tensor<16x8xbf16>
    %wkva = k3.weight "kv_a.weight" : tensor<6x8xbf16>
    %kvn = k3.weight "kv_a_norm.weight" : tensor<4xbf16>
    %wkvb = k3.weight "kv_b.weight" : tensor<20x4xbf16>
    %wo = k3.weight "o.weight" : tensor<8x8xbf16>
    %c = k3.state "layers.0.mla" : !k3.mla_cache<max_seq = 16, width = 6>
    // expected-error @+1 {{'k3.mla' op cannot be split over 3 ranks: its heads (2) is not divisible by 3}}
    %y = k3.mla %h, %pos, %c q(%wq) weights(%wkva, %kvn, %wkvb, %wo)
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 4, nope = 6, rope = 2, v_dim = 4>}
           : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 16, width = 6>, tensor<16x8xbf16>, tensor<6x8xbf16>,
              tensor<4xbf16>, tensor<20x4xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
    return %y : tensor<8xbf16>
  }
}

// -----

// expected-error @+1 {{k3-partition-ranks: expects a function @decode_step}}
module {
  func.func @other() {
    return
  }
}
