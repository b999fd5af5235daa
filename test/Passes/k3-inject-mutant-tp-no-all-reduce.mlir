// RUN: k3-opt %s -pass-pipeline='builtin.module(k3-partition-ranks{ranks=2 rank=0}, func.func(k3-inject-mutant{kind=tp-no-all-reduce}))' | FileCheck %s
// RUN: k3-opt %s -pass-pipeline='builtin.module(func.func(k3-inject-mutant{kind=tp-no-all-reduce}))' -verify-diagnostics -split-input-file

// The graph mutant C7: the mixer's partial o_proj output flows on without
// its all-reduce; the MLP's all-reduce stays.
// CHECK-LABEL: func.func @decode_step
// CHECK: %[[P:.*]] = k3.mla
// CHECK-NOT: k3.all_reduce %[[P]]
// CHECK: %[[M:.*]] = k3.dense_mlp %[[P]],
// CHECK: k3.all_reduce %[[M]] {ranks = 2 : i64}
module {
  // expected-error @+1 {{k3-inject-mutant: tp-no-all-reduce found no k3.all_reduce after a k3.kda or k3.mla; run it after k3-partition-ranks with ranks > 1, on the coarse IR}}
  func.func @decode_step(%h: tensor<8xbf16>, %pos: index) -> tensor<8xbf16> {
    %wq = k3.weight "q_proj.weight" : tensor<16x8xbf16>
    %wkva = k3.weight "kv_a.weight" : tensor<6x8xbf16>
    %kvn = k3.weight "kv_a_norm.weight" : tensor<4xbf16>
    %wkvb = k3.weight "kv_b.weight" : tensor<20x4xbf16>
    %wo = k3.weight "o.weight" : tensor<8x8xbf16>
    %c = k3.state "layers.0.mla" : !k3.mla_cache<max_seq = 16, width = 6>
    %y = k3.mla %h, %pos, %c q(%wq) weights(%wkva, %kvn, %wkvb, %wo)
           {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 4, nope = 6, rope = 2, v_dim = 4>}
           : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 16, width = 6>, tensor<16x8xbf16>, tensor<6x8xbf16>,
              tensor<4xbf16>, tensor<20x4xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
    %w1 = k3.weight "w1.weight" : tensor<16x8xbf16>
    %w3 = k3.weight "w3.weight" : tensor<16x8xbf16>
    %w2 = k3.weight "w2.weight" : tensor<8x16xbf16>
    %m = k3.dense_mlp %y, %w1, %w3, %w2 {act = #k3<activation silu>}
           : (tensor<8xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
    return %m : tensor<8xbf16>
  }
}
