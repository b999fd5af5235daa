//===- CudaDriver.h - The CUDA driver API, loaded at run time ----*- C++
//-*-===//
//
// The runtime talks to the GPU through the CUDA driver API only (PTX in,
// cuLaunchKernel out), and opens libcuda.so.1 with dlopen: a k3c binary then
// starts, and runs on the CPU, on a machine without an NVIDIA driver, and is
// not tied to one CUDA toolkit. Every call returns a Status whose message
// names the call and the CUresult (numerically too: the stub driver of a
// toolkit without a GPU cannot even name its errors).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CUDA_CUDADRIVER_H
#define K3C_RUNTIME_EXEC_CUDA_CUDADRIVER_H

#include "runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace k3 {
namespace cuda {

/// Opaque driver handles (the driver's own typedefs, without cuda.h).
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphNode = struct CUgraphNode_st *;
using CUgraphExec = struct CUgraphExec_st *;

/// The process-wide driver: libcuda loaded, cuInit done, device 0's primary
/// context current on the calling thread.
class Driver {
public:
  /// Loads the driver once. Errors: no libcuda.so.1 (no NVIDIA driver), a
  /// stub driver, no device.
  static Expected<Driver *> get();

  /// Device name and compute capability, e.g. "NVIDIA H200 (sm_90)".
  const std::string &deviceName() const { return deviceName_; }
  int computeMajor() const { return major_; }
  int computeMinor() const { return minor_; }
  /// Number of SMs.
  int smCount() const { return smCount_; }

  Expected<CUdeviceptr> alloc(size_t bytes);
  void free(CUdeviceptr p);
  Status copyToDevice(CUdeviceptr dst, const void *src, size_t bytes);
  Status copyToHost(void *dst, CUdeviceptr src, size_t bytes);
  Status copyToHostAsync(void *dst, CUdeviceptr src, size_t bytes,
                         CUstream stream);
  /// Host-to-device copy ordered on `stream`; from pageable memory the
  /// bytes are staged before it returns, so `src` may be reused at once.
  Status copyToDeviceAsync(CUdeviceptr dst, const void *src, size_t bytes,
                           CUstream stream);
  Status memset8(CUdeviceptr dst, uint8_t value, size_t bytes);
  /// Device-to-device copy queued on `stream` (the copy-bandwidth
  /// measurement of the profiler and the benchmarks).
  Status copyDeviceAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                         CUstream stream);

  /// Loads a PTX module (JIT-compiled by the driver for this device); the
  /// error carries the JIT log.
  Expected<CUmodule> loadModule(const std::string &ptx);
  Expected<CUfunction> function(CUmodule module, const std::string &name);
  /// Unloads a module loadModule returned (its functions and variables go
  /// with it; null: no-op).
  void unloadModule(CUmodule module);
  /// Lets launches of `f` ask for as much dynamic shared memory as the
  /// device allows a block beside `f`'s static shared memory (beyond the
  /// default 48 KiB), and returns that many bytes.
  Expected<int64_t> allowDynamicShared(CUfunction f);
  /// A module-scope __device__ variable: its address and size.
  Expected<std::pair<CUdeviceptr, size_t>> global(CUmodule module,
                                                  const std::string &name);
  /// Launches `f` with one argument: the params struct at `params`
  /// (`paramBytes` long), passed by value. `programmatic`: with programmatic
  /// stream serialization (Hopper's dependent launch: `f` may start while
  /// the previous kernel in the stream runs; every k3 kernel waits for it
  /// before touching memory, kernels/common/CudaCommon.cuh); ignored when
  /// the driver lacks cuLaunchKernelEx. `cluster` [3] (null: none): the
  /// grid in thread-block clusters of that shape (Hopper; the grid a
  /// multiple of it).
  Status launch(CUfunction f, const int64_t grid[3], const int64_t block[3],
                int64_t smem, CUstream stream, void *params,
                bool programmatic = false, const int64_t *cluster = nullptr);
  /// Whether launch(..., programmatic) and programmatic graph edges are
  /// available (driver entry points of CUDA 12.3+ and an sm_90 device).
  bool hasProgrammaticLaunch() const { return hasPdl_; }

  /// Whether the driver has the CUDA graph entry points below.
  bool hasGraphs() const { return hasGraphs_; }
  /// CUDA graphs: a chain of kernel nodes, each depending on the previous
  /// one (`after` null for the first), instantiated once and replayed; the
  /// params of a node are copied when it is added or updated.
  Expected<CUgraph> createGraph();
  /// `programmatic`: the edge from `after` is a programmatic one (the
  /// graph form of launch(..., programmatic)); `cluster` as for launch (a
  /// node attribute, set before the graph is instantiated).
  Expected<CUgraphNode> addKernelNode(CUgraph graph, CUgraphNode after,
                                      CUfunction f, const int64_t grid[3],
                                      const int64_t block[3], int64_t smem,
                                      void *params, bool programmatic = false,
                                      const int64_t *cluster = nullptr);
  Expected<CUgraphExec> instantiate(CUgraph graph);
  Status setKernelNodeParams(CUgraphExec exec, CUgraphNode node, CUfunction f,
                             const int64_t grid[3], const int64_t block[3],
                             int64_t smem, void *params);
  Status launchGraph(CUgraphExec exec, CUstream stream);

  /// Releases what the create/instantiate calls above made (null: no-op).
  void destroy(CUstream s);
  void destroy(CUevent e);
  void destroy(CUgraph g);
  void destroy(CUgraphExec e);

  Expected<CUstream> createStream();
  Status synchronize(CUstream stream);
  Expected<CUevent> createEvent();
  Status record(CUevent e, CUstream stream);
  /// Milliseconds between two recorded events (waits for `end`).
  Expected<float> elapsedMs(CUevent start, CUevent end);

  struct Api; ///< the resolved entry points (CudaDriver.cpp)

private:
  Driver() = default;
  Status check(int result, const char *call) const;
  /// The entry points, with the context made current on the calling thread
  /// first (once per thread).
  Api &api() const;

  std::unique_ptr<Api> api_;
  CUcontext context_ = nullptr;
  std::string deviceName_;
  int major_ = 0, minor_ = 0, smCount_ = 0, maxSmemOptin_ = 0;
  bool hasPdl_ = false;
  bool hasGraphs_ = false;
};

/// A device allocation that frees itself.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  /// `bytes` of device memory (at least 1 byte is allocated).
  static Expected<DeviceBuffer> create(size_t bytes);
  /// A copy of `bytes` host bytes.
  static Expected<DeviceBuffer> upload(const void *data, size_t bytes);

  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T> T *as() const {
    return reinterpret_cast<T *>(static_cast<uintptr_t>(ptr_));
  }

private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

} // namespace cuda
} // namespace k3

#endif // K3C_RUNTIME_EXEC_CUDA_CUDADRIVER_H
