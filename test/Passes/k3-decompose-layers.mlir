// RUN: k3-opt %s -split-input-file -k3-decompose-layers | FileCheck %s

// KDA with a full-rank output gate and a lower-bounded decay: the chain of
// fine ops with the constants the kernels need (l2norm eps 1e-6, q scale
// 1/sqrt(head_dim) = 0.5, k scale 1; conv offsets 0, C, 2C; the gate's lower
// bound; the mixer's eps on the gated norm). The conv width (3) differs from
// head_dim (4) so that mixing them up shows.
// CHECK-LABEL: func.func @kda_full_rank
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[CS:[^:]*]]: !k3.conv_state<{{[^>]*}}>, %[[S:[^:]*]]: !k3.kda_state<{{[^>]*}}>,
// CHECK-SAME: %[[WQ:[^:]*]]: tensor<8x8xbf16>, %[[WK:[^:]*]]: tensor<8x8xbf16>, %[[WV:[^:]*]]: tensor<8x8xbf16>,
// CHECK-SAME: %[[CQ:[^:]*]]: tensor<8x1x3xbf16>, %[[CK:[^:]*]]: tensor<8x1x3xbf16>, %[[CV:[^:]*]]: tensor<8x1x3xbf16>,
// CHECK-SAME: %[[FA:[^:]*]]: tensor<4x8xbf16>, %[[FB:[^:]*]]: tensor<8x4xbf16>, %[[DT:[^:]*]]: tensor<8xf32>, %[[AL:[^:]*]]: tensor<2xf32>,
// CHECK-SAME: %[[WB:[^:]*]]: tensor<2x8xbf16>, %[[ON:[^:]*]]: tensor<4xbf16>, %[[WO:[^:]*]]: tensor<8x8xbf16>, %[[WG:[^:]*]]: tensor<8x8xbf16>)
// CHECK-NOT: k3.kda %
// CHECK: %[[UQ:.*]] = k3.linear %[[H]], %[[WQ]] :
// CHECK: %[[UK:.*]] = k3.linear %[[H]], %[[WK]] :
// CHECK: %[[UV:.*]] = k3.linear %[[H]], %[[WV]] :
// CHECK: %[[QC:.*]] = k3.conv_step %[[UQ]], %[[CQ]], %[[CS]] {offset = 0 : i64}
// CHECK: %[[KC:.*]] = k3.conv_step %[[UK]], %[[CK]], %[[CS]] {offset = 8 : i64}
// CHECK: %[[VC:.*]] = k3.conv_step %[[UV]], %[[CV]], %[[CS]] {offset = 16 : i64}
// CHECK: %[[Q:.*]] = k3.l2norm %[[QC]] {eps = 9.9999999999999995E-7 : f64, head_dim = 4 : i64, scale = 5.000000e-01 : f64} : tensor<8xbf16> -> tensor<8xf32>
// CHECK: %[[K:.*]] = k3.l2norm %[[KC]] {eps = 9.9999999999999995E-7 : f64, head_dim = 4 : i64, scale = 1.000000e+00 : f64} : tensor<8xbf16> -> tensor<8xf32>
// CHECK: %[[FL:.*]] = k3.linear %[[H]], %[[FA]] :
// CHECK: %[[F:.*]] = k3.linear %[[FL]], %[[FB]] :
// CHECK: %[[G:.*]] = k3.kda_gate %[[F]], %[[DT]], %[[AL]] {heads = 2 : i64, lower_bound = -5.000000e+00 : f64}
// CHECK: %[[BL:.*]] = k3.linear %[[H]], %[[WB]] :
// CHECK: %[[BETA:.*]] = k3.sigmoid %[[BL]] : tensor<2xbf16> -> tensor<2xf32>
// CHECK: %[[O:.*]] = k3.kda_step %[[Q]], %[[K]], %[[VC]], %[[G]], %[[BETA]], %[[S]]
// CHECK: %[[GT:.*]] = k3.linear %[[H]], %[[WG]] :
// CHECK: %[[N:.*]] = k3.gated_rms_norm %[[O]], %[[GT]], %[[ON]] {eps = 2.000000e-05 : f64, head_dim = 4 : i64}
// CHECK: %[[Y:.*]] = k3.linear %[[N]], %[[WO]] :
// CHECK-NOT: k3.kda %
// CHECK: return %[[Y]]
func.func @kda_full_rank(%h: tensor<8xbf16>, %cs: !k3.conv_state<channels = 24, window = 2>,
                         %s: !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
                         %wq: tensor<8x8xbf16>, %wk: tensor<8x8xbf16>, %wv: tensor<8x8xbf16>,
                         %cq: tensor<8x1x3xbf16>, %ck: tensor<8x1x3xbf16>, %cv: tensor<8x1x3xbf16>,
                         %fa: tensor<4x8xbf16>, %fb: tensor<8x4xbf16>, %dt: tensor<8xf32>, %alog: tensor<2xf32>,
                         %wb: tensor<2x8xbf16>, %on: tensor<4xbf16>, %wo: tensor<8x8xbf16>,
                         %wg: tensor<8x8xbf16>) -> tensor<8xbf16> {
  %y = k3.kda %h, %cs, %s weights(%wq, %wk, %wv, %cq, %ck, %cv, %fa, %fb, %dt, %alog, %wb, %on, %wo) gate(%wg)
         {config = #k3.kda<heads = 2, head_dim = 4, conv = 3, full_rank_gate = true, lower_bound = -5.0>, eps = 2.0e-05 : f64}
         : (tensor<8xbf16>, !k3.conv_state<channels = 24, window = 2>, !k3.kda_state<heads = 2, key_dim = 4, value_dim = 4>,
            tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>, tensor<8x1x3xbf16>,
            tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<8xf32>, tensor<2xf32>, tensor<2x8xbf16>, tensor<4xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// KDA with the softplus decay (no lower bound) and a low-rank output gate
// g_b(g_a h). A head_dim of 16 makes the q scale 0.25.
// CHECK-LABEL: func.func @kda_low_rank
// CHECK-SAME: %[[GA:[^:]*]]: tensor<16x32xbf16>, %[[GB:[^:]*]]: tensor<32x16xbf16>)
// CHECK: k3.l2norm %{{.*}} {eps = 9.9999999999999995E-7 : f64, head_dim = 16 : i64, scale = 2.500000e-01 : f64}
// CHECK: k3.l2norm %{{.*}} {eps = 9.9999999999999995E-7 : f64, head_dim = 16 : i64, scale = 1.000000e+00 : f64}
// CHECK: k3.kda_gate %{{.*}} {heads = 2 : i64} :
// CHECK-NOT: lower_bound
// CHECK: %[[GTA:.*]] = k3.linear %{{.*}}, %[[GA]] :
// CHECK: %[[GT:.*]] = k3.linear %[[GTA]], %[[GB]] :
// CHECK: k3.gated_rms_norm %{{.*}}, %[[GT]], %{{.*}} {eps = 1.000000e-05 : f64, head_dim = 16 : i64}
// CHECK-NOT: k3.kda %
// CHECK: return
func.func @kda_low_rank(%h: tensor<32xbf16>, %cs: !k3.conv_state<channels = 96, window = 3>,
                        %s: !k3.kda_state<heads = 2, key_dim = 16, value_dim = 16>,
                        %w: tensor<32x32xbf16>, %c: tensor<32x1x4xbf16>,
                        %fa: tensor<16x32xbf16>, %fb: tensor<32x16xbf16>, %dt: tensor<32xf32>, %alog: tensor<2xf32>,
                        %wb: tensor<2x32xbf16>, %on: tensor<16xbf16>,
                        %ga: tensor<16x32xbf16>, %gb: tensor<32x16xbf16>) -> tensor<32xbf16> {
  %y = k3.kda %h, %cs, %s weights(%w, %w, %w, %c, %c, %c, %fa, %fb, %dt, %alog, %wb, %on, %w) low_rank_gate(%ga, %gb)
         {config = #k3.kda<heads = 2, head_dim = 16, conv = 4>, eps = 1.0e-05 : f64}
         : (tensor<32xbf16>, !k3.conv_state<channels = 96, window = 3>, !k3.kda_state<heads = 2, key_dim = 16, value_dim = 16>,
            tensor<32x32xbf16>, tensor<32x32xbf16>, tensor<32x32xbf16>, tensor<32x1x4xbf16>, tensor<32x1x4xbf16>,
            tensor<32x1x4xbf16>, tensor<16x32xbf16>, tensor<32x16xbf16>, tensor<32xf32>, tensor<2xf32>, tensor<2x32xbf16>,
            tensor<16xbf16>, tensor<32x32xbf16>, tensor<16x32xbf16>, tensor<32x16xbf16>) -> tensor<32xbf16>
  return %y : tensor<32xbf16>
}

// -----

// MLA with a q LoRA and an output gate: the q_a and kv_a layernorms use
// eps 1e-6 (not rms_norm_eps); the attend keeps the config.
// CHECK-LABEL: func.func @mla_q_lora_gated
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %[[POS:[^:]*]]: index, %[[C:[^:]*]]: !k3.mla_cache<{{[^>]*}}>,
// CHECK-SAME: %[[QA:[^:]*]]: tensor<6x8xbf16>, %[[QAN:[^:]*]]: tensor<6xbf16>, %[[QB:[^:]*]]: tensor<16x6xbf16>,
// CHECK-SAME: %[[KVA:[^:]*]]: tensor<12x8xbf16>, %[[KVN:[^:]*]]: tensor<8xbf16>, %[[KVB:[^:]*]]: tensor<16x8xbf16>,
// CHECK-SAME: %[[WO:[^:]*]]: tensor<8x8xbf16>, %[[WG:[^:]*]]: tensor<8x8xbf16>)
// CHECK-NOT: k3.mla %
// CHECK: %[[QL:.*]] = k3.linear %[[H]], %[[QA]] :
// CHECK: %[[QN:.*]] = k3.rms_norm %[[QL]], %[[QAN]] {eps = 9.9999999999999995E-7 : f64}
// CHECK: %[[Q:.*]] = k3.linear %[[QN]], %[[QB]] :
// CHECK: %[[KV:.*]] = k3.linear %[[H]], %[[KVA]] :
// CHECK: k3.mla_cache_append %[[KV]], %[[KVN]], %[[C]], %[[POS]] {eps = 9.9999999999999995E-7 : f64}
// CHECK: %[[O:.*]] = k3.mla_attend %[[Q]], %[[KVB]], %[[C]], %[[POS]]
// CHECK-SAME: {config = #k3.mla<heads = 2, q_lora = 6, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
// CHECK: %[[GT:.*]] = k3.linear %[[H]], %[[WG]] :
// CHECK: %[[OG:.*]] = k3.mul_sigmoid %[[O]], %[[GT]]
// CHECK: %[[Y:.*]] = k3.linear %[[OG]], %[[WO]] :
// CHECK-NOT: k3.mla %
// CHECK: return %[[Y]]
func.func @mla_q_lora_gated(%h: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                            %qa: tensor<6x8xbf16>, %qan: tensor<6xbf16>, %qb: tensor<16x6xbf16>,
                            %kva: tensor<12x8xbf16>, %kvn: tensor<8xbf16>, %kvb: tensor<16x8xbf16>,
                            %wo: tensor<8x8xbf16>, %wg: tensor<8x8xbf16>) -> tensor<8xbf16> {
  %y = k3.mla %h, %pos, %cache q_lora(%qa, %qan, %qb) weights(%kva, %kvn, %kvb, %wo) gate(%wg)
         {config = #k3.mla<heads = 2, q_lora = 6, kv_lora = 8, nope = 4, rope = 4, v_dim = 4, output_gate = true>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<6x8xbf16>, tensor<6xbf16>,
            tensor<16x6xbf16>, tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>,
            tensor<8x8xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// MLA with a direct q_proj and no gate: no q norm, no mul_sigmoid.
// CHECK-LABEL: func.func @mla_direct_q
// CHECK-SAME: (%[[H:[^:]*]]: tensor<8xbf16>, %{{[^:]*}}: index, %{{[^:]*}}: !k3.mla_cache<{{[^>]*}}>, %[[WQ:[^:]*]]: tensor<16x8xbf16>,
// CHECK-NOT: k3.rms_norm
// CHECK: %[[Q:.*]] = k3.linear %[[H]], %[[WQ]] :
// CHECK-NOT: k3.rms_norm
// CHECK: k3.mla_cache_append {{.*}} {eps = 9.9999999999999995E-7 : f64}
// CHECK: %[[O:.*]] = k3.mla_attend %[[Q]],
// CHECK-SAME: {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
// CHECK-NOT: k3.mul_sigmoid
// CHECK: %[[Y:.*]] = k3.linear %[[O]],
// CHECK: return %[[Y]]
func.func @mla_direct_q(%h: tensor<8xbf16>, %pos: index, %cache: !k3.mla_cache<max_seq = 64, width = 12>,
                        %wq: tensor<16x8xbf16>, %kva: tensor<12x8xbf16>, %kvn: tensor<8xbf16>,
                        %kvb: tensor<16x8xbf16>, %wo: tensor<8x8xbf16>) -> tensor<8xbf16> {
  %y = k3.mla %h, %pos, %cache q(%wq) weights(%kva, %kvn, %kvb, %wo)
         {config = #k3.mla<heads = 2, q_lora = 0, kv_lora = 8, nope = 4, rope = 4, v_dim = 4>}
         : (tensor<8xbf16>, index, !k3.mla_cache<max_seq = 64, width = 12>, tensor<16x8xbf16>,
            tensor<12x8xbf16>, tensor<8xbf16>, tensor<16x8xbf16>, tensor<8x8xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// A SiTU dense MLP keeps both betas (not the defaults 4 and 25).
// CHECK-LABEL: func.func @dense_situ
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W1:[^:]*]]: tensor<32x8xbf16>, %[[W3:[^:]*]]: tensor<32x8xbf16>, %[[W2:[^:]*]]: tensor<8x32xbf16>)
// CHECK-NOT: k3.dense_mlp
// CHECK: %[[G:.*]] = k3.linear %[[X]], %[[W1]] :
// CHECK: %[[U:.*]] = k3.linear %[[X]], %[[W3]] :
// CHECK: %[[A:.*]] = k3.situ %[[G]], %[[U]] {beta = 3.000000e+00 : f64, linear_beta = 2.000000e+01 : f64}
// CHECK: %[[Y:.*]] = k3.linear %[[A]], %[[W2]] :
// CHECK: return %[[Y]]
func.func @dense_situ(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                      %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %y = k3.dense_mlp %x, %w1, %w3, %w2 {act = #k3<activation situ>, situ_beta = 3.0 : f64, situ_linear_beta = 20.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// SiTU without the linear branch: no linear_beta appears.
// CHECK-LABEL: func.func @dense_situ_one_beta
// CHECK: k3.situ %{{.*}}, %{{.*}} {beta = 3.000000e+00 : f64} :
// CHECK-NOT: linear_beta
func.func @dense_situ_one_beta(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                               %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %y = k3.dense_mlp %x, %w1, %w3, %w2 {act = #k3<activation situ>, situ_beta = 3.0 : f64}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// SwiGLU: the silu activation op, no betas.
// CHECK-LABEL: func.func @dense_silu
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W1:[^:]*]]: tensor<32x8xbf16>, %[[W3:[^:]*]]: tensor<32x8xbf16>, %[[W2:[^:]*]]: tensor<8x32xbf16>)
// CHECK: %[[G:.*]] = k3.linear %[[X]], %[[W1]] :
// CHECK: %[[U:.*]] = k3.linear %[[X]], %[[W3]] :
// CHECK: %[[A:.*]] = k3.swiglu %[[G]], %[[U]] : tensor<32xbf16>
// CHECK: k3.linear %[[A]], %[[W2]] :
// CHECK-NOT: k3.situ
func.func @dense_silu(%x: tensor<8xbf16>, %w1: tensor<32x8xbf16>, %w3: tensor<32x8xbf16>,
                      %w2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %y = k3.dense_mlp %x, %w1, %w3, %w2 {act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<32x8xbf16>, tensor<32x8xbf16>, tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Plain MoE: the router gets top_k, renormalize (here false) and the routed
// scaling from the config; the experts the activation; the shared experts
// are a gated MLP on x added to the routed mix.
// CHECK-LABEL: func.func @moe
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[GATE:[^:]*]]: tensor<4x8xbf16>, %[[BIAS:[^:]*]]: tensor<4xf32>,
// CHECK-SAME: %[[E1:[^:]*]]: tensor<4x16x8xbf16>, %[[E3:[^:]*]]: tensor<4x16x8xbf16>, %[[E2:[^:]*]]: tensor<4x8x16xbf16>,
// CHECK-SAME: %[[S1:[^:]*]]: tensor<16x8xbf16>, %[[S3:[^:]*]]: tensor<16x8xbf16>, %[[S2:[^:]*]]: tensor<8x16xbf16>)
// CHECK-NOT: k3.moe
// CHECK: %[[IDS:.*]], %[[WTS:.*]] = k3.router %[[X]], %[[GATE]], %[[BIAS]] {renormalize = false, scaling = 2.500000e+00 : f64, top_k = 3 : i64}
// CHECK-SAME: -> (tensor<3xi32>, tensor<3xf32>)
// CHECK: %[[MIX:.*]] = k3.expert_mix %[[X]], %[[IDS]], %[[WTS]], %[[E1]], %[[E3]], %[[E2]] {act = #k3<activation silu>}
// CHECK: %[[SG:.*]] = k3.linear %[[X]], %[[S1]] :
// CHECK: %[[SU:.*]] = k3.linear %[[X]], %[[S3]] :
// CHECK: %[[SA:.*]] = k3.swiglu %[[SG]], %[[SU]]
// CHECK: %[[SH:.*]] = k3.linear %[[SA]], %[[S2]] :
// CHECK: %[[Y:.*]] = k3.add %[[MIX]], %[[SH]]
// CHECK: return %[[Y]]
func.func @moe(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %e1: tensor<4x16x8xbf16>,
               %e3: tensor<4x16x8xbf16>, %e2: tensor<4x8x16xbf16>, %s1: tensor<16x8xbf16>, %s3: tensor<16x8xbf16>,
               %s2: tensor<8x16xbf16>) -> tensor<8xbf16> {
  %y = k3.moe %x router(%gate, %bias) experts(%e1, %e3, %e2) shared(%s1, %s3, %s2)
         {config = #k3.moe<experts = 4, top_k = 3, intermediate = 16, shared = 1, renormalize = false, scaling = 2.5 : f64>,
          act = #k3<activation silu>}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<4x16x8xbf16>, tensor<4x16x8xbf16>,
            tensor<4x8x16xbf16>, tensor<16x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Latent MoE: experts on z = down x, the latent norm with the op's eps, the
// up projection, then the shared experts; SiTU betas reach both the routed
// and the shared experts.
// CHECK-LABEL: func.func @latent_moe
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[GATE:[^:]*]]: tensor<4x8xbf16>, %[[BIAS:[^:]*]]: tensor<4xf32>,
// CHECK-SAME: %[[DOWN:[^:]*]]: tensor<32x8xbf16>, %[[UP:[^:]*]]: tensor<8x32xbf16>, %[[N:[^:]*]]: tensor<32xbf16>,
// CHECK-SAME: %[[W:[^:]*]]: !k3.mxfp4<4x32x32>, %[[S1:[^:]*]]: tensor<32x8xbf16>,
// CHECK-NOT: k3.latent_moe
// CHECK: %[[Z:.*]] = k3.linear %[[X]], %[[DOWN]] :
// CHECK: %[[IDS:.*]], %[[WTS:.*]] = k3.router %[[X]], %[[GATE]], %[[BIAS]] {renormalize = true, scaling = 1.500000e+00 : f64, top_k = 2 : i64}
// CHECK: %[[MIX:.*]] = k3.expert_mix %[[Z]], %[[IDS]], %[[WTS]], %[[W]], %[[W]], %[[W]]
// CHECK-SAME: {act = #k3<activation situ>, situ_beta = 3.000000e+00 : f64, situ_linear_beta = 2.000000e+01 : f64}
// CHECK: %[[R:.*]] = k3.rms_norm %[[MIX]], %[[N]] {eps = 2.000000e-05 : f64}
// CHECK: %[[RU:.*]] = k3.linear %[[R]], %[[UP]] :
// CHECK: %[[SG:.*]] = k3.linear %[[X]], %[[S1]] :
// CHECK: k3.situ {{.*}} {beta = 3.000000e+00 : f64, linear_beta = 2.000000e+01 : f64}
// CHECK: %[[SH:.*]] = k3.linear
// CHECK: %[[Y:.*]] = k3.add %[[RU]], %[[SH]]
// CHECK: return %[[Y]]
func.func @latent_moe(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %down: tensor<32x8xbf16>,
                      %up: tensor<8x32xbf16>, %n: tensor<32xbf16>, %w: !k3.mxfp4<4x32x32>, %s1: tensor<32x8xbf16>,
                      %s3: tensor<32x8xbf16>, %s2: tensor<8x32xbf16>) -> tensor<8xbf16> {
  %y = k3.latent_moe %x router(%gate, %bias) latent(%down, %up) norm(%n) experts(%w, %w, %w) shared(%s1, %s3, %s2)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 32, shared = 1, scaling = 1.5 : f64>,
          act = #k3<activation situ>, situ_beta = 3.0 : f64, situ_linear_beta = 20.0 : f64, eps = 2.0e-05 : f64}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<32x8xbf16>, tensor<8x32xbf16>, tensor<32xbf16>,
            !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32x8xbf16>, tensor<32x8xbf16>,
            tensor<8x32xbf16>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// Latent MoE without a latent norm or shared experts: no rms_norm, no add.
// CHECK-LABEL: func.func @latent_moe_bare
// CHECK: %[[Z:.*]] = k3.linear
// CHECK: k3.router
// CHECK: %[[MIX:.*]] = k3.expert_mix %[[Z]],
// CHECK-NOT: k3.rms_norm
// CHECK: %[[Y:.*]] = k3.linear %[[MIX]],
// CHECK-NOT: k3.add
// CHECK: return %[[Y]]
func.func @latent_moe_bare(%x: tensor<8xbf16>, %gate: tensor<4x8xbf16>, %bias: tensor<4xf32>, %down: tensor<32x8xbf16>,
                           %up: tensor<8x32xbf16>, %w: !k3.mxfp4<4x32x32>) -> tensor<8xbf16> {
  %y = k3.latent_moe %x router(%gate, %bias) latent(%down, %up) experts(%w, %w, %w)
         {config = #k3.moe<experts = 4, top_k = 2, intermediate = 32, shared = 0, scaling = 1.0 : f64>,
          act = #k3<activation silu>, eps = 1.0e-05 : f64}
         : (tensor<8xbf16>, tensor<4x8xbf16>, tensor<4xf32>, tensor<32x8xbf16>, tensor<8x32xbf16>,
            !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>) -> tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

// lm_head is a projection with an unrounded f32 result and no norm.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8xbf16>, %[[W:[^:]*]]: tensor<16x8xbf16>)
// CHECK-NOT: k3.lm_head
// CHECK: %[[L:.*]] = k3.linear %[[X]], %[[W]] : (tensor<8xbf16>, tensor<16x8xbf16>) -> tensor<16xf32>
// CHECK: return %[[L]]
func.func @lm_head(%x: tensor<8xbf16>, %w: tensor<16x8xbf16>) -> tensor<16xf32> {
  %l = k3.lm_head %x, %w : tensor<8xbf16>, tensor<16x8xbf16> -> tensor<16xf32>
  return %l : tensor<16xf32>
}
