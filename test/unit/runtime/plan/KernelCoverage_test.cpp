//===- KernelCoverage_test.cpp - Every plan kernel is implemented and tested ===//
//
// The kernel table (runtime/plan/PlanKernels.cpp) is the one list of entry
// points; docs/PLAN.md's table is checked against it in Plan_test. This test
// checks the rest of a kernel's files against it, reading the source tree:
// each kernel has a CPU implementation (runtime/exec/CpuKernels.cpp), a CUDA
// entry point `k3_<name>` in kernels/<family>/*.cu, a GPU test that launches
// it by name (test/unit/cuda/*_cuda_test.cpp), and a section in
// docs/KERNELS.md; and no .cu defines an entry point the table lacks (but
// for the CUDA backend's multi-row forms, kCudaRowsForms).
// (docs/CONTRIBUTING.md says what a new kernel touches.)
//
//===----------------------------------------------------------------------===//
#include "kernels/synthetic/SyntheticParams.h"
#include "runtime/exec/CpuKernels.h"
#include "runtime/exec/cuda/RowsForms.h"
#include "runtime/plan/PlanKernels.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using namespace k3;

const fs::path kSource = K3C_SOURCE_DIR;

std::string readFile(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The concatenated text of the files under `dir` whose names end in `ext`.
std::string readAll(const fs::path &dir, const std::string &ext) {
  std::string all;
  for (const auto &e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() > ext.size() &&
        name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      all += readFile(e.path()) + "\n";
  }
  return all;
}

TEST(KernelCoverage, EveryKernelHasItsFiles) {
  const std::string cu = readAll(kSource / "kernels", ".cu");
  const std::string gpuTests = readAll(kSource / "test/unit/cuda", ".cpp");
  const std::string doc = readFile(kSource / "docs/KERNELS.md");
  ASSERT_FALSE(cu.empty()) << "no kernels/**/*.cu under " << kSource;
  ASSERT_FALSE(gpuTests.empty());
  ASSERT_FALSE(doc.empty());
  ASSERT_GE(kernelTable().size(), 20u);
  for (const KernelInfo &k : kernelTable()) {
    EXPECT_NE(doc.find("`" + k.name + "`"), std::string::npos)
        << k.name << ": docs/KERNELS.md does not mention `" << k.name << "`";
    // A collective is no kernel: the backend's communicator runs it
    // (RankGroup.h); tensor_parallel_test covers it.
    if (k.collective)
      continue;
    EXPECT_NE(findCpuKernel(k.name), nullptr)
        << k.name << ": no CPU implementation in runtime/exec/CpuKernels.cpp";
    // (The params may be __grid_constant__: k3_mla_attend's are.)
    EXPECT_TRUE(std::regex_search(
        cu, std::regex("\\bk3_" + k.name +
                       "\\s*\\(\\s*const (__grid_constant__ )?" + k.paramsName +
                       "\\b")))
        << k.name << ": no CUDA entry point k3_" << k.name << "(const "
        << k.paramsName << ") in kernels/*/*.cu";
    EXPECT_NE(gpuTests.find("\"" + k.name + "\""), std::string::npos)
        << k.name << ": no GPU test in test/unit/cuda launches it by name";
  }
}

TEST(KernelCoverage, NoEntryPointOutsideTheTable) {
  const std::string cu = readAll(kSource / "kernels", ".cu");
  // An entry point takes its params struct by value (CudaCommon.cuh).
  const std::regex entry("\\bk3_([a-z0-9_]+)\\s*\\(\\s*const [A-Za-z0-9]+Params ");
  std::set<std::string> defined;
  for (auto it = std::sregex_iterator(cu.begin(), cu.end(), entry);
       it != std::sregex_iterator(); ++it)
    defined.insert((*it)[1].str());
  ASSERT_GE(defined.size(), 20u) << "the entry-point pattern matched too few";
  // The multi-row forms the CUDA backend launches for a table kernel (both
  // kinds: one params struct for all rows, and a params array per row; and
  // the tensor-core forms of the first kind).
  std::set<std::string> forms;
  for (const char *k : kCudaRowsForms) {
    EXPECT_NE(findKernel(k), nullptr) << k;
    EXPECT_TRUE(defined.count(std::string(k) + "_rows"))
        << "kCudaRowsForms names " << k << ", but no kernels/*/*.cu defines k3_"
        << k << "_rows";
    forms.insert(std::string(k) + "_rows");
  }
  for (const char *k : kCudaRowsArrayForms) {
    EXPECT_NE(findKernel(k), nullptr) << k;
    EXPECT_TRUE(defined.count(std::string(k) + "_rows"))
        << "kCudaRowsArrayForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_rows";
    forms.insert(std::string(k) + "_rows");
  }
  for (const char *k : kCudaClusteredRowsForms) {
    EXPECT_TRUE(hasRowsArrayForm(k))
        << k << ": a clustered form of no rows form";
    EXPECT_TRUE(defined.count(std::string(k) + "_rows_clustered"))
        << "kCudaClusteredRowsForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_rows_clustered";
    forms.insert(std::string(k) + "_rows_clustered");
  }
  for (const char *k : kCudaRunForms) {
    EXPECT_TRUE(hasRowsArrayForm(k)) << k << ": a run form of no array form";
    EXPECT_TRUE(defined.count(std::string(k) + "_run"))
        << "kCudaRunForms names " << k << ", but no kernels/*/*.cu defines k3_"
        << k << "_run";
    forms.insert(std::string(k) + "_run");
  }
  for (const char *k : kCudaChunkForms) {
    EXPECT_TRUE(hasRunForm(k) || hasRowsAnySlotForm(k))
        << k
        << ": a chunk form of neither a run form nor a rows form of any slot";
    EXPECT_TRUE(defined.count(std::string(k) + "_chunk"))
        << "kCudaChunkForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_chunk";
    forms.insert(std::string(k) + "_chunk");
  }
  for (const char *k : kCudaBatchForms) {
    EXPECT_TRUE(hasRowsAnySlotForm(k)) << k << ": a batch form of no rows form";
    EXPECT_TRUE(defined.count(std::string(k) + "_batch"))
        << "kCudaBatchForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_batch";
    forms.insert(std::string(k) + "_batch");
  }
  for (const char *k : kCudaMoeChunkKernels) {
    EXPECT_TRUE(defined.count(k)) << "kCudaMoeChunkKernels names " << k
                                  << ", but no kernels/*/*.cu defines k3_" << k;
    forms.insert(k);
  }
  for (const char *k : kCudaMoeChunkNarrowKernels) {
    EXPECT_TRUE(defined.count(k)) << "kCudaMoeChunkNarrowKernels names " << k
                                  << ", but no kernels/*/*.cu defines k3_" << k;
    forms.insert(k);
  }
  for (const char *k : kCudaMmaRowsForms) {
    EXPECT_TRUE(hasRowsForm(k)) << k << ": a tensor-core form of no rows form";
    EXPECT_TRUE(defined.count(std::string(k) + "_rows_mma"))
        << "kCudaMmaRowsForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_rows_mma";
    forms.insert(std::string(k) + "_rows_mma");
  }
  for (const char *k : kCudaMma16RowsForms) {
    EXPECT_TRUE(hasRowsForm(k)) << k << ": a narrow form of no rows form";
    EXPECT_TRUE(defined.count(std::string(k) + "_rows_mma16"))
        << "kCudaMma16RowsForms names " << k
        << ", but no kernels/*/*.cu defines k3_" << k << "_rows_mma16";
    forms.insert(std::string(k) + "_rows_mma16");
  }
  for (const char *k : kCudaOptionalForms)
    EXPECT_TRUE(forms.count(k))
        << "kCudaOptionalForms names " << k << ", not a form of the lists";
  for (const char *k : kCudaGpuUntestedForms)
    EXPECT_TRUE(optionalForm(k))
        << "kCudaGpuUntestedForms names " << k << ", not an optional form";
  // The CUDA backend's draw of synthetic weights (no plan kernel).
  EXPECT_TRUE(defined.count(kSyntheticNormalKernel))
      << "no kernels/*/*.cu defines k3_" << kSyntheticNormalKernel;
  forms.insert(kSyntheticNormalKernel);
  EXPECT_TRUE(defined.count(kCudaMmaPreNormKernel))
      << "no kernels/*/*.cu defines k3_" << kCudaMmaPreNormKernel;
  forms.insert(kCudaMmaPreNormKernel);
  for (const std::string &name : defined)
    EXPECT_TRUE(findKernel(name) != nullptr || forms.count(name))
        << "kernels/*/*.cu defines k3_" << name
        << ", which the kernel table (runtime/plan/PlanKernels.cpp) lacks";
}

} // namespace
