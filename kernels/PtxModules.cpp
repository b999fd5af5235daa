//===- PtxModules.cpp - Finding an entry point's PTX module ---------------===//
#include "kernels/PtxModules.h"

#include <string_view>

namespace k3 {

const PtxModule *ptxModuleFor(const std::string &kernel) {
  // An entry is declared ".entry k3_<kernel>(" in the PTX text.
  const std::string decl = ".entry k3_" + kernel + "(";
  for (const PtxModule &m : embeddedPtxModules())
    if (std::string_view(m.ptx, m.size).find(decl) != std::string_view::npos)
      return &m;
  return nullptr;
}

} // namespace k3
