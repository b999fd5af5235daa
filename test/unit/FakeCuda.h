//===- FakeCuda.h - Stub PTX for the fake CUDA driver ------------*- C++
//-*-===//
//
// Tests that run the CUDA backend's host code over the fake driver
// (test/unit/runtime/exec/FakeCudaDriver.cpp, loaded through K3C_CUDA_DRIVER)
// point K3C_PTX_DIR at stub PTX: one module that declares every entry point
// the backend may look up (the fake driver finds a function by
// ".entry k3_<name>("), so that a build without nvcc (the sanitizer build)
// runs them too.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_FAKECUDA_H
#define K3C_TEST_UNIT_FAKECUDA_H

#include "kernels/synthetic/SyntheticParams.h"
#include "runtime/exec/cuda/RowsForms.h"
#include "runtime/plan/PlanKernels.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace k3::test {

/// Every entry point the CUDA backend may look up, declared in one PTX text.
inline std::string stubPtx() {
  std::vector<std::string> names;
  for (const KernelInfo &k : kernelTable())
    names.push_back(k.name);
  for (const char *k : kCudaRowsForms)
    names.push_back(std::string(k) + "_rows");
  for (const char *k : kCudaRowsArrayForms)
    names.push_back(std::string(k) + "_rows");
  for (const char *k : kCudaClusteredRowsForms)
    names.push_back(std::string(k) + "_rows_clustered");
  for (const char *k : kCudaRunForms)
    names.push_back(std::string(k) + "_run");
  for (const char *k : kCudaChunkForms)
    names.push_back(std::string(k) + "_chunk");
  for (const char *k : kCudaBatchForms)
    names.push_back(std::string(k) + "_batch");
  for (const char *k : kCudaMoeChunkKernels)
    names.push_back(k);
  for (const char *k : kCudaMoeChunkNarrowKernels)
    names.push_back(k);
  for (const char *k : kCudaMmaRowsForms)
    names.push_back(std::string(k) + "_rows_mma");
  for (const char *k : kCudaMma16RowsForms)
    names.push_back(std::string(k) + "_rows_mma16");
  names.push_back(kCudaMmaPreNormKernel);
  names.push_back(kSyntheticNormalKernel);
  std::string ptx = "// k3c stub PTX for the fake driver\n";
  for (const std::string &n : names)
    ptx += ".visible .entry k3_" + n + "(\n)\n{\n}\n";
  return ptx;
}

/// Writes stubPtx() to DIR/stub.ptx (DIR created): a K3C_PTX_DIR.
inline void writeStubPtx(const std::string &dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(std::filesystem::path(dir) / "stub.ptx") << stubPtx();
}

} // namespace k3::test

#endif // K3C_TEST_UNIT_FAKECUDA_H
