//===- PtxModules.cpp - Finding an entry point's PTX module ---------------===//
#include "kernels/PtxModules.h"

#include <string_view>

namespace k3 {

bool ptxDefines(std::string_view ptx, const std::string &kernel) {
  // An entry is declared ".entry k3_<kernel>(" in the PTX text.
  return ptx.find(".entry k3_" + kernel + "(") != std::string_view::npos;
}

const PtxModule *ptxModuleFor(const std::string &kernel) {
  for (const PtxModule &m : embeddedPtxModules())
    if (ptxDefines(std::string_view(m.ptx, m.size), kernel))
      return &m;
  return nullptr;
}

} // namespace k3
