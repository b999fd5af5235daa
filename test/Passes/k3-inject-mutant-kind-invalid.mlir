// An unknown mutant kind names the ones that exist.
// RUN: k3-opt %s -verify-diagnostics -k3-inject-mutant=kind=no-such-kind

// expected-error @below {{unknown kind 'no-such-kind' (expected attn-res-skip | router-expert0 | skip-layer | tp-no-all-reduce)}}
func.func @any(%x: tensor<8xbf16>) -> tensor<8xbf16> {
  return %x : tensor<8xbf16>
}
