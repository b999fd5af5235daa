//===- CpuKernels.cpp - The CPU implementation of each plan kernel --------===//
#include "runtime/exec/CpuKernels.h"

#include "kernels/attnres/AttnResCpu.h"
#include "kernels/elementwise/ElementwiseCpu.h"
#include "kernels/embed/EmbedCpu.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/head/HeadCpu.h"
#include "kernels/kda/KdaCpu.h"
#include "kernels/mla/MlaCpu.h"
#include "kernels/moe/MoeCpu.h"
#include "kernels/norm/NormCpu.h"

#include <cstring>

namespace k3 {
namespace {

template <typename P, void (*Fn)(const P &)> void runAs(const void *params) {
  Fn(*static_cast<const P *>(params));
}

struct Entry {
  const char *name;
  CpuEntry run;
};

/// In the kernel table's order (a test checks every table entry has one).
const Entry kEntries[] = {
    {"embed", &runAs<EmbedParams, embedCpu>},
    {"rms_norm", &runAs<RmsNormParams, rmsNormCpu>},
    {"linear", &runAs<LinearParams, linearCpu>},
    {"linear_multi", &runAs<LinearMultiParams, linearMultiCpu>},
    {"add", &runAs<AddParams, addCpu>},
    {"mul_sigmoid", &runAs<MulSigmoidParams, mulSigmoidCpu>},
    {"gated_act", &runAs<GatedActParams, gatedActCpu>},
    {"kda_conv", &runAs<KdaConvParams, kdaConvCpu>},
    {"kda_l2norm", &runAs<KdaL2NormParams, kdaL2NormStepCpu>},
    {"kda_gate", &runAs<KdaGateParams, kdaGateCpu>},
    {"sigmoid", &runAs<SigmoidParams, sigmoidCpu>},
    {"kda_step", &runAs<KdaStepParams, kdaStepCpu>},
    {"kda_gated_norm", &runAs<KdaGatedNormParams, kdaGatedNormCpu>},
    {"kda_decode", &runAs<KdaDecodeParams, kdaDecodeCpu>},
    {"mla_cache_append", &runAs<MlaCacheAppendParams, mlaCacheAppendCpu>},
    {"mla_attend", &runAs<MlaAttendParams, mlaAttendCpu>},
    {"mla_attend_clustered", &runAs<MlaAttendParams, mlaAttendClusteredCpu>},
    {"router", &runAs<RouterParams, routerCpu>},
    {"gated_mlp", &runAs<GatedMlpParams, gatedMlpCpu>},
    {"moe_experts", &runAs<MoeExpertsParams, moeExpertsCpu>},
    // The tensor-core form computes moe_experts' result (within rounding).
    {"moe_experts_mxfp4", &runAs<MoeExpertsParams, moeExpertsCpu>},
    {"moe_ffn", &runAs<MoeFfnParams, moeFfnCpu>},
    {"attn_res", &runAs<AttnResParams, attnResCpu>},
    // The clustered form computes attn_res's result (within rounding).
    {"attn_res_clustered", &runAs<AttnResParams, attnResCpu>},
    {"attn_res_commit", &runAs<AttnResCommitParams, attnResCommitCpu>},
    {"argmax", &runAs<ArgmaxParams, argmaxCpu>},
};

template <typename P, void (*Fn)(const P *const *, size_t)>
void runRowsAs(const void *const *params, size_t rows) {
  Fn(reinterpret_cast<const P *const *>(params), rows);
}

struct RowsEntry {
  const char *name;
  CpuRowsEntry run;
};

/// The kernels with a multi-row form: the projections and the MoE (each
/// expert of the rows' union once), whose weights a step's rows share.
const RowsEntry kRowsEntries[] = {
    {"linear", &runRowsAs<LinearParams, linearRowsCpu>},
    {"linear_multi", &runRowsAs<LinearMultiParams, linearMultiRowsCpu>},
    {"moe_experts", &runRowsAs<MoeExpertsParams, moeExpertsRowsCpu>},
    {"moe_experts_mxfp4", &runRowsAs<MoeExpertsParams, moeExpertsRowsCpu>},
    {"moe_ffn", &runRowsAs<MoeFfnParams, moeFfnRowsCpu>},
};

/// The kernels with a prefill (chunk) form: PrefillForm::Chunk.
const RowsEntry kChunkRowsEntries[] = {
    {"kda_decode", &runRowsAs<KdaDecodeParams, kdaDecodeRowsChunkCpu>},
};

/// The `run` of table entry `name`, or null.
template <typename E, size_t N>
auto lookup(const E (&table)[N], const std::string &name)
    -> decltype(table[0].run) {
  for (const E &e : table)
    if (name == e.name)
      return e.run;
  return nullptr;
}

} // namespace

CpuRowsEntry findCpuChunkRowsKernel(const std::string &name) {
  return lookup(kChunkRowsEntries, name);
}

CpuRowsEntry findCpuRowsKernel(const std::string &name) {
  return lookup(kRowsEntries, name);
}

CpuEntry findCpuKernel(const std::string &name) {
  return lookup(kEntries, name);
}

} // namespace k3
