// RUN: k3-opt %s -split-input-file -k3-fuse-mla | FileCheck %s

// Cache append, attend and output gate become one k3.mla_decode; the kv_a,
// q and gate projections stay outside (kv_a and q read the same input, so
// the norm and projection fusions can make them one launch).
// CHECK-LABEL: func.func @mla_gated
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[Q:[^:]*]]: tensor<16xbf16>, %[[KVA:[^:]*]]: tensor<12x8xbf16>,
// CHECK-SAME: %[[KVN:[^:]*]]: tensor<8xbf16>, %[[KVB:[^:]*]]: tensor<16x8xbf16>, %[[C:[^:]*]]: !k3.mla_cache<{{.*}}>,
// CHECK-SAME: %[[POS:[^:]*]]: index, %[[WG:[^:]*]]: tensor<8x8xbf16>)
// CHECK: %[[KV:.*]] = k3.linear %[[H]], %[[KVA]]
// CHECK-NOT: k3.mla_cache_append
// CHECK-NOT: k3.mla_attend
// CHECK: %[[GT:.*]] = k3.linear %[[H]], %[[WG]]
// CHECK-NEXT: %[[O:.*]] = k3.mla_decode %[[KV]], %[[Q]] weights(%[[KVN]], %[[KVB]]) cache(%[[C]], %[[POS]]) gate(%[[GT]])
// CHECK-SAME: {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>,
// CHECK-SAME: eps = 9.9999999999999995E-7 : f64}
// CHECK-NOT: k3.mla_cache_append
// CHECK-NOT: k3.mla_attend
// CHECK-NOT: k3.mul_sigmoid
// CHECK: return %[[O]]
func.func @mla_gated(%h: tensor<8xbf16>, %q: tensor<16xbf16>, %kva: tensor<12x8xbf16>, %kvn: tensor<8xbf16>,
                     %kvb: tensor<16x8xbf16>, %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index,
                     %wg: tensor<8x8xbf16>) -> tensor<8xbf16> {
  %kv = k3.linear %h, %kva : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  %o = k3.mla_attend %q, %kvb, %cache, %pos
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  %gt = k3.linear %h, %wg : (tensor<8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  %og = k3.mul_sigmoid %o, %gt : tensor<8xbf16>
  return %og : tensor<8xbf16>
}

// -----

// Without a gate the fused op's config says output_gate = false. The eps is
// the append's (here 2e-6, not the usual 1e-6), and the config carries
// every dimension of the attend's (here q_lora 3, nope 5, rope 3).
// CHECK-LABEL: func.func @mla_ungated
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[Q:[^:]*]]: tensor<16xbf16>, %[[KVA:[^:]*]]: tensor<11x8xbf16>,
// CHECK: %[[KV:.*]] = k3.linear %[[H]], %[[KVA]]
// CHECK-NOT: k3.mla_cache_append
// CHECK: %[[O:.*]] = k3.mla_decode %[[KV]], %[[Q]] weights(
// CHECK-NOT: gate(
// CHECK-SAME: {config = #k3.mla<heads = 2, q_lora = 3, kv_lora = 8, nope = 5, rope = 3, v_dim = 4>, eps = 2.000000e-06 : f64}
// CHECK-NOT: k3.mla_attend
// CHECK-NOT: k3.linear
// CHECK: return %[[O]]
func.func @mla_ungated(%h: tensor<8xbf16>, %q: tensor<16xbf16>, %kva: tensor<11x8xbf16>, %kvn: tensor<8xbf16>,
                       %kvb: tensor<18x8xbf16>, %cache: !k3.mla_cache<max_seq = 64, width = 11>,
                       %pos: index) -> tensor<8xbf16> {
  %kv = k3.linear %h, %kva : (tensor<8xbf16>, tensor<11x8xbf16>) -> tensor<11xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 2.0e-06 : f64}
    : (tensor<11xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 11>, index) -> ()
  %o = k3.mla_attend %q, %kvb, %cache, %pos
         {config = #k3.mla<heads = 2, q_lora = 3, kv_lora = 8, nope = 5, rope = 3, v_dim = 4>}
         : (tensor<16xbf16>, tensor<18x8xbf16>, !k3.mla_cache<max_seq = 64, width = 11>, index) -> tensor<8xbf16>
  return %o : tensor<8xbf16>
}

// -----

// The gate is not folded: the un-gated attention output is also returned,
// so the mul_sigmoid stays and the fused op has no gate.
// CHECK-LABEL: func.func @mla_output_escapes
// CHECK: %[[O:.*]] = k3.mla_decode
// CHECK-SAME: v_dim = 4>
// CHECK: %[[G:.*]] = k3.mul_sigmoid %[[O]]
// CHECK: return %[[G]], %[[O]]
func.func @mla_output_escapes(%h: tensor<8xbf16>, %q: tensor<16xbf16>, %kva: tensor<12x8xbf16>, %kvn: tensor<8xbf16>,
                              %kvb: tensor<16x8xbf16>, %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                              %pos: index, %gt: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %kv = k3.linear %h, %kva : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  %o = k3.mla_attend %q, %kvb, %cache, %pos
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  %og = k3.mul_sigmoid %o, %gt : tensor<8xbf16>
  return %og, %o : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: another append to the same cache sits between the append and
// the attend; moving both down to the attend would reorder the writes.
// CHECK-LABEL: func.func @mla_cache_touched_between
// CHECK-NOT: k3.mla_decode
// CHECK: k3.mla_cache_append
// CHECK: k3.mla_cache_append
// CHECK: k3.mla_attend
func.func @mla_cache_touched_between(%h: tensor<8xbf16>, %q: tensor<16xbf16>, %kva: tensor<12x8xbf16>,
                                     %kvn: tensor<8xbf16>, %kvb: tensor<16x8xbf16>,
                                     %cache: !k3.mla_cache<max_seq = 64, width = 12>, %pos: index, %pos2: index,
                                     %other: tensor<12xbf16>) -> tensor<8xbf16> {
  %kv = k3.linear %h, %kva : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  k3.mla_cache_append %other, %kvn, %cache, %pos2 {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  %o = k3.mla_attend %q, %kvb, %cache, %pos
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  return %o : tensor<8xbf16>
}

// -----

// The latent kv may have other uses: its projection is no part of the fused
// op.
// CHECK-LABEL: func.func @mla_kv_escapes
// CHECK: %[[KV:.*]] = k3.linear
// CHECK-NEXT: %[[O:.*]] = k3.mla_decode %[[KV]],
// CHECK-NOT: k3.mla_attend
// CHECK: return %[[O]], %[[KV]]
func.func @mla_kv_escapes(%h: tensor<8xbf16>, %q: tensor<16xbf16>, %kva: tensor<12x8xbf16>, %kvn: tensor<8xbf16>,
                          %kvb: tensor<16x8xbf16>, %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                          %pos: index) -> (tensor<8xbf16>, tensor<12xbf16>) {
  %kv = k3.linear %h, %kva : (tensor<8xbf16>, tensor<12x8xbf16>) -> tensor<12xbf16>
  k3.mla_cache_append %kv, %kvn, %cache, %pos {eps = 1.0e-06 : f64}
    : (tensor<12xbf16>, tensor<8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> ()
  %o = k3.mla_attend %q, %kvb, %cache, %pos
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<16xbf16>, tensor<16x8xbf16>, !k3.mla_cache<max_seq = 64, width = 12>, index) -> tensor<8xbf16>
  return %o, %kv : tensor<8xbf16>, tensor<12xbf16>
}
