// RUN: k3-opt %s -split-input-file -k3-fuse-attn-res | FileCheck %s

// rms_norm(attn_res) with the same eps → attn_res ... then_norm(w), keeping
// the count and the eps (1e-6 here, so that a default would show). The
// un-normalised AttnRes is gone.
// CHECK-LABEL: func.func @attn_res_norm
// CHECK-SAME: (%[[BL:[^:]*]]: !k3.attn_res_blocks<{{[^>]*}}>, %[[P:[^:]*]]: tensor<8xbf16>, %[[RN:[^:]*]]: tensor<8xbf16>,
// CHECK-SAME: %[[PR:[^:]*]]: tensor<1x8xbf16>, %[[W:[^:]*]]: tensor<8xbf16>)
// CHECK-NOT: k3.rms_norm
// CHECK-NOT: = k3.attn_res
// CHECK: %[[H:.*]] = k3.attn_res %[[BL]], %[[P]], %[[RN]], %[[PR]] then_norm(%[[W]]) {count = 2 : i64, eps = 9.9999999999999995E-7 : f64}
// CHECK-NOT: k3.rms_norm
// CHECK-NOT: = k3.attn_res
// CHECK: return %[[H]]
func.func @attn_res_norm(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>,
                         %rn: tensor<8xbf16>, %proj: tensor<1x8xbf16>, %w: tensor<8xbf16>) -> tensor<8xbf16> {
  %a = k3.attn_res %blocks, %p, %rn, %proj {count = 2 : i64, eps = 1.0e-06 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  %h = k3.rms_norm %a, %w {eps = 1.0e-06 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %h : tensor<8xbf16>
}

// -----

// The fused op stays where AttnRes read the blocks: a commit after it must
// not become visible to the read.
// CHECK-LABEL: func.func @commit_between
// CHECK: %[[W:.*]] = k3.weight "final_norm"
// CHECK-NEXT: %[[H:.*]] = k3.attn_res {{.*}} then_norm(%[[W]]) {count = 1 : i64, eps = 1.000000e-05 : f64}
// CHECK-NEXT: k3.attn_res_commit
// CHECK-NOT: k3.rms_norm
// CHECK: return %[[H]]
func.func @commit_between(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>,
                          %rn: tensor<8xbf16>, %proj: tensor<1x8xbf16>) -> tensor<8xbf16> {
  %w = k3.weight "final_norm" : tensor<8xbf16>
  %a = k3.attn_res %blocks, %p, %rn, %proj {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  k3.attn_res_commit %blocks, %p {index = 1 : i64} : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>
  %h = k3.rms_norm %a, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %h : tensor<8xbf16>
}

// -----

// Not fused: the norm's eps differs from the AttnRes eps (the kernel has one).
// CHECK-LABEL: func.func @eps_differs
// CHECK: %[[A:.*]] = k3.attn_res
// CHECK-NOT: then_norm
// CHECK: k3.rms_norm %[[A]]
func.func @eps_differs(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>,
                       %rn: tensor<8xbf16>, %proj: tensor<1x8xbf16>, %w: tensor<8xbf16>) -> tensor<8xbf16> {
  %a = k3.attn_res %blocks, %p, %rn, %proj {count = 2 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  %h = k3.rms_norm %a, %w {eps = 1.0e-06 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %h : tensor<8xbf16>
}

// -----

// Not fused: the un-normalised AttnRes output is also used (the residual
// stream), so it must still be written.
// CHECK-LABEL: func.func @attn_res_two_users
// CHECK: %[[A:.*]] = k3.attn_res
// CHECK-NOT: then_norm
// CHECK: %[[H:.*]] = k3.rms_norm %[[A]]
// CHECK: return %[[H]], %[[A]]
func.func @attn_res_two_users(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>,
                              %rn: tensor<8xbf16>, %proj: tensor<1x8xbf16>, %w: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %a = k3.attn_res %blocks, %p, %rn, %proj {count = 2 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  %h = k3.rms_norm %a, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %h, %a : tensor<8xbf16>, tensor<8xbf16>
}

// -----

// Not fused: the norm weight is defined after AttnRes and a commit lies in
// between, so the fused op could sit neither before the weight nor after
// the commit.
// CHECK-LABEL: func.func @weight_after_commit
// CHECK: %[[A:.*]] = k3.attn_res
// CHECK-NOT: then_norm
// CHECK: k3.attn_res_commit
// CHECK: k3.rms_norm %[[A]]
func.func @weight_after_commit(%blocks: !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, %p: tensor<8xbf16>,
                               %rn: tensor<8xbf16>, %proj: tensor<1x8xbf16>) -> tensor<8xbf16> {
  %a = k3.attn_res %blocks, %p, %rn, %proj {count = 1 : i64, eps = 1.0e-05 : f64}
         : (!k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<8xbf16>
  k3.attn_res_commit %blocks, %p {index = 1 : i64} : !k3.attn_res_blocks<max_blocks = 3, hidden = 8>, tensor<8xbf16>
  %w = k3.weight "final_norm" : tensor<8xbf16>
  %h = k3.rms_norm %a, %w {eps = 1.0e-05 : f64} : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  return %h : tensor<8xbf16>
}
