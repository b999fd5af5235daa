//===- CpuKernels.h - The CPU implementation of each plan kernel -*- C++ -*-===//
//
// The CPU backend's half of the kernel table: for each kernel name of
// runtime/plan/PlanKernels.h, the function in kernels/<family>/*Cpu.cpp that
// consumes its params struct. Kept apart from the table so that the compiler,
// which reads the table, links no kernel implementation.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CPUKERNELS_H
#define K3C_RUNTIME_EXEC_CPUKERNELS_H

#include <string>

namespace k3 {

/// Runs one kernel on the CPU with a filled params struct of its type.
using CpuEntry = void (*)(const void *params);

/// The CPU implementation of kernel `name`, or null when there is none.
CpuEntry findCpuKernel(const std::string &name);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CPUKERNELS_H
