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

/// A kernel's multi-row CPU form: the params of `rows` bindings of one plan
/// launch (the rows of a step), run at once; each row's outputs equal its
/// CpuEntry call bit for bit.
using CpuRowsEntry = void (*)(const void *const *params, size_t rows);

/// The multi-row form of kernel `name`, or null when it has none (a step
/// then runs the rows one by one). Stateless kernels only: a stateful one
/// must meet its rows in order, which the one-by-one loop does.
CpuRowsEntry findCpuRowsKernel(const std::string &name);

/// The prefill form of kernel `name` over a step's rows
/// (PrefillForm::Chunk, Backend.h): a stateful kernel whose consecutive rows
/// of one sequence (the same state) run together, within fp32 rounding of
/// the rows one by one, not bit for bit (kda_decode's chunk form); null when
/// it has none.
CpuRowsEntry findCpuChunkRowsKernel(const std::string &name);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CPUKERNELS_H
