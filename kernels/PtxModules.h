//===- PtxModules.h - The kernels' PTX built into the binary ---*- C++ -*-===//
//
// With CUDA enabled at build time, every kernels/<family>/<Family>.cu is
// compiled to PTX for sm_90 and embedded here; without it the list is empty.
// Entry points are `k3_<plan kernel name>` (kernels/common/CudaCommon.cuh).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_PTXMODULES_H
#define K3C_KERNELS_PTXMODULES_H

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

/// One PTX module: a kernel family.
struct PtxModule {
  const char *name; ///< the family, e.g. "gemv"
  const char *ptx;  ///< NUL-terminated PTX text
  size_t size;      ///< bytes, without the NUL
};

/// The embedded modules (empty in a build without CUDA).
const std::vector<PtxModule> &embeddedPtxModules();

/// Whether PTX text `ptx` defines the entry point `k3_<kernel>`.
bool ptxDefines(std::string_view ptx, const std::string &kernel);

/// The embedded module that defines the entry point `k3_<kernel>`, or null.
const PtxModule *ptxModuleFor(const std::string &kernel);

} // namespace k3

#endif // K3C_KERNELS_PTXMODULES_H
