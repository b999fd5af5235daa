//===- CudaDriver.cpp - The CUDA driver API, loaded at run time -----------===//
//
// Only the entry points the runtime uses, resolved with dlsym under their
// versioned names (the _v2 ABI every driver since CUDA 4 exports).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/cuda/CudaDriver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace k3 {
namespace cuda {

namespace {
using CUresult = int;
using CUdevice = int;
// Values from cuda.h (stable ABI).
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeMajor = 75;
constexpr int kAttrComputeMinor = 76;
constexpr int kAttrMaxSharedPerBlockOptin = 97;
constexpr int kFuncAttrMaxDynamicShared = 8;
constexpr int kFuncAttrStaticShared = 1;
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSize = 6;
constexpr unsigned kEventDefault = 0;
constexpr unsigned kStreamNonBlocking = 1;

/// CUDA_KERNEL_NODE_PARAMS_v2 of cuda.h.
struct KernelNodeParams {
  CUfunction func;
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  void **kernelParams;
  void **extra;
  void *kern;
  CUcontext ctx;
};

/// CUlaunchAttribute / CUlaunchConfig / CUgraphEdgeData of cuda.h (CUDA
/// 12.3+), for programmatic dependent launch.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
    struct {
      unsigned x, y, z;
    } clusterDim;
  } value;
};
struct LaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};
struct GraphEdgeData {
  unsigned char fromPort, toPort, type, reserved[5];
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute layout");
static_assert(sizeof(GraphEdgeData) == 8, "CUgraphEdgeData layout");
constexpr int kLaunchAttrClusterDimension = 4;
constexpr int kLaunchAttrProgrammaticStreamSerialization = 6;
constexpr unsigned char kGraphDependencyProgrammatic = 1;
constexpr unsigned char kGraphKernelPortProgrammatic = 1;

/// Whether `cluster` (null: none) asks for clusters of more than one block.
bool clustered(const int64_t *cluster) {
  return cluster && cluster[0] * cluster[1] * cluster[2] > 1;
}

/// The cluster-dimension launch attribute of `cluster` [3].
LaunchAttribute clusterAttribute(const int64_t *cluster) {
  LaunchAttribute a{};
  a.id = kLaunchAttrClusterDimension;
  a.value.clusterDim.x = static_cast<unsigned>(cluster[0]);
  a.value.clusterDim.y = static_cast<unsigned>(cluster[1]);
  a.value.clusterDim.z = static_cast<unsigned>(cluster[2]);
  return a;
}

KernelNodeParams nodeParams(CUfunction f, const int64_t grid[3],
                            const int64_t block[3], int64_t smem, void **args) {
  KernelNodeParams p{};
  p.func = f;
  p.gridDimX = static_cast<unsigned>(grid[0]);
  p.gridDimY = static_cast<unsigned>(grid[1]);
  p.gridDimZ = static_cast<unsigned>(grid[2]);
  p.blockDimX = static_cast<unsigned>(block[0]);
  p.blockDimY = static_cast<unsigned>(block[1]);
  p.blockDimZ = static_cast<unsigned>(block[2]);
  p.sharedMemBytes = static_cast<unsigned>(smem);
  p.kernelParams = args;
  return p;
}
} // namespace

struct Driver::Api {
  void *lib = nullptr;
  CUresult (*init)(unsigned);
  CUresult (*deviceGetCount)(int *);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*deviceGetName)(char *, int, CUdevice);
  CUresult (*deviceGetAttribute)(int *, int, CUdevice);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*memAlloc)(CUdeviceptr *, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*memcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*memcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*memcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*moduleLoadDataEx)(CUmodule *, const void *, unsigned, int *,
                               void **);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*moduleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
  CUresult (*moduleUnload)(CUmodule);
  CUresult (*funcSetAttribute)(CUfunction, int, int);
  CUresult (*funcGetAttribute)(int *, int, CUfunction);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **);
  CUresult (*streamCreate)(CUstream *, unsigned);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*eventCreate)(CUevent *, unsigned);
  CUresult (*eventRecord)(CUevent, CUstream);
  CUresult (*eventSynchronize)(CUevent);
  CUresult (*eventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*getErrorName)(CUresult, const char **);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*eventDestroy)(CUevent);
  CUresult (*graphCreate)(CUgraph *, unsigned);
  CUresult (*graphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *,
                                 size_t, const KernelNodeParams *);
  CUresult (*graphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*graphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                           const KernelNodeParams *);
  CUresult (*graphLaunch)(CUgraphExec, CUstream);
  CUresult (*graphDestroy)(CUgraph);
  CUresult (*graphExecDestroy)(CUgraphExec);
  CUresult (*launchKernelEx)(const LaunchConfig *, CUfunction, void **,
                             void **);
  CUresult (*graphAddDependencies)(CUgraph, const CUgraphNode *,
                                   const CUgraphNode *, const GraphEdgeData *,
                                   size_t);
  /// cuGraphKernelNodeSetAttribute (its value type is CUlaunchAttribute's
  /// union, the bytes after LaunchAttribute::pad).
  CUresult (*graphKernelNodeSetAttribute)(CUgraphNode, int, const void *);
};

Status Driver::check(int result, const char *call) const {
  if (result == 0)
    return Status::ok();
  const char *name = nullptr;
  if (api_ && api_->getErrorName)
    api_->getErrorName(result, &name);
  return makeError(call, " failed: CUresult ", result, " (",
                   name ? name : "unnamed", ")");
}

Expected<Driver *> Driver::get() {
  static std::once_flag once;
  static Driver *driver = nullptr;
  static Status failure;
  std::call_once(once, [] {
    std::unique_ptr<Driver> d(new Driver());
    d->api_ = std::make_unique<Api>();
    Api &a = *d->api_;
    // K3C_CUDA_DRIVER: another library with the driver's entry points (the
    // tests' fake driver, test/unit/runtime/exec/FakeCudaDriver.cpp).
    const char *other = std::getenv("K3C_CUDA_DRIVER");
    const std::string path = other && *other ? other : "libcuda.so.1";
    a.lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      failure = makeError("no CUDA driver: cannot load ", path, " (",
                          ::dlerror(), ")");
      return;
    }
    struct Sym {
      void **slot;
      const char *name;
    } syms[] = {
        {(void **)&a.init, "cuInit"},
        {(void **)&a.deviceGetCount, "cuDeviceGetCount"},
        {(void **)&a.deviceGet, "cuDeviceGet"},
        {(void **)&a.deviceGetName, "cuDeviceGetName"},
        {(void **)&a.deviceGetAttribute, "cuDeviceGetAttribute"},
        {(void **)&a.primaryCtxRetain, "cuDevicePrimaryCtxRetain"},
        {(void **)&a.ctxSetCurrent, "cuCtxSetCurrent"},
        {(void **)&a.memAlloc, "cuMemAlloc_v2"},
        {(void **)&a.memFree, "cuMemFree_v2"},
        {(void **)&a.memcpyHtoD, "cuMemcpyHtoD_v2"},
        {(void **)&a.memcpyDtoH, "cuMemcpyDtoH_v2"},
        {(void **)&a.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
        {(void **)&a.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
        {(void **)&a.memsetD8, "cuMemsetD8_v2"},
        {(void **)&a.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
        {(void **)&a.moduleLoadDataEx, "cuModuleLoadDataEx"},
        {(void **)&a.moduleGetFunction, "cuModuleGetFunction"},
        {(void **)&a.moduleGetGlobal, "cuModuleGetGlobal_v2"},
        {(void **)&a.moduleUnload, "cuModuleUnload"},
        {(void **)&a.funcSetAttribute, "cuFuncSetAttribute"},
        {(void **)&a.funcGetAttribute, "cuFuncGetAttribute"},
        {(void **)&a.launchKernel, "cuLaunchKernel"},
        {(void **)&a.streamCreate, "cuStreamCreate"},
        {(void **)&a.streamSynchronize, "cuStreamSynchronize"},
        {(void **)&a.eventCreate, "cuEventCreate"},
        {(void **)&a.eventRecord, "cuEventRecord"},
        {(void **)&a.eventSynchronize, "cuEventSynchronize"},
        {(void **)&a.eventElapsedTime, "cuEventElapsedTime"},
        {(void **)&a.getErrorName, "cuGetErrorName"},
        {(void **)&a.streamDestroy, "cuStreamDestroy_v2"},
        {(void **)&a.eventDestroy, "cuEventDestroy_v2"},
    };
    for (const Sym &s : syms) {
      *s.slot = ::dlsym(a.lib, s.name);
      if (!*s.slot) {
        failure = makeError("the CUDA driver lacks ", s.name);
        return;
      }
    }
    // CUDA graphs (driver 525+, the _v2 node ABI of CUDA 12): optional.
    Sym graphSyms[] = {
        {(void **)&a.graphCreate, "cuGraphCreate"},
        {(void **)&a.graphAddKernelNode, "cuGraphAddKernelNode_v2"},
        {(void **)&a.graphInstantiate, "cuGraphInstantiateWithFlags"},
        {(void **)&a.graphExecKernelNodeSetParams,
         "cuGraphExecKernelNodeSetParams_v2"},
        {(void **)&a.graphLaunch, "cuGraphLaunch"},
        {(void **)&a.graphDestroy, "cuGraphDestroy"},
        {(void **)&a.graphExecDestroy, "cuGraphExecDestroy"},
    };
    d->hasGraphs_ = true;
    for (const Sym &s : graphSyms) {
      *s.slot = ::dlsym(a.lib, s.name);
      d->hasGraphs_ = d->hasGraphs_ && *s.slot;
    }
    // Programmatic dependent launch (CUDA 12.3+): optional too.
    a.launchKernelEx = reinterpret_cast<decltype(a.launchKernelEx)>(
        ::dlsym(a.lib, "cuLaunchKernelEx"));
    a.graphAddDependencies = reinterpret_cast<decltype(a.graphAddDependencies)>(
        ::dlsym(a.lib, "cuGraphAddDependencies_v2"));
    // Thread-block clusters in graphs (CUDA 12.0+): optional.
    a.graphKernelNodeSetAttribute =
        reinterpret_cast<decltype(a.graphKernelNodeSetAttribute)>(
            ::dlsym(a.lib, "cuGraphKernelNodeSetAttribute"));
    Status st = d->check(a.init(0), "cuInit");
    if (!st) {
      failure = st.withContext("no usable CUDA driver (a stub libcuda returns "
                               "34)");
      return;
    }
    int count = 0;
    if (!(st = d->check(a.deviceGetCount(&count), "cuDeviceGetCount"))) {
      failure = st;
      return;
    }
    if (count < 1) {
      failure = makeError("no CUDA device");
      return;
    }
    CUdevice dev = 0;
    char name[256] = {0};
    if (!(st = d->check(a.deviceGet(&dev, 0), "cuDeviceGet")) ||
        !(st = d->check(a.deviceGetName(name, sizeof(name) - 1, dev),
                        "cuDeviceGetName")) ||
        !(st =
              d->check(a.deviceGetAttribute(&d->major_, kAttrComputeMajor, dev),
                       "cuDeviceGetAttribute")) ||
        !(st =
              d->check(a.deviceGetAttribute(&d->minor_, kAttrComputeMinor, dev),
                       "cuDeviceGetAttribute")) ||
        !(st = d->check(
              a.deviceGetAttribute(&d->smCount_, kAttrMultiprocessorCount, dev),
              "cuDeviceGetAttribute")) ||
        !(st = d->check(a.deviceGetAttribute(&d->maxSmemOptin_,
                                             kAttrMaxSharedPerBlockOptin, dev),
                        "cuDeviceGetAttribute")) ||
        !(st = d->check(a.primaryCtxRetain(&d->context_, dev),
                        "cuDevicePrimaryCtxRetain"))) {
      failure = st;
      return;
    }
    d->deviceName_ = std::string(name) + " (sm_" + std::to_string(d->major_) +
                     std::to_string(d->minor_) + ")";
    // Dependent launch needs sm_90 (griddepcontrol) and both entry points;
    // K3C_PDL=0 turns it off (to measure what it buys).
    const char *pdl = std::getenv("K3C_PDL");
    d->hasPdl_ = a.launchKernelEx && a.graphAddDependencies && d->major_ >= 9 &&
                 !(pdl && std::string(pdl) == "0");
    driver = d.release();
  });
  if (!driver)
    return failure;
  // The primary context is per device; make it current on this thread.
  K3_RETURN_IF_ERROR(driver->check(
      driver->api_->ctxSetCurrent(driver->context_), "cuCtxSetCurrent"));
  return driver;
}

Driver::Api &Driver::api() const {
  // The primary context is current on the thread that called get(); a
  // backend bound on one thread may be stepped on another (a server's
  // worker, a test's), so each thread makes it current before its first
  // call. (Ignoring a failure here: the call then fails, named.) A thread
  // that makes another context current itself (another CUDA library) must
  // restore this one: the cache would not see the change.
  thread_local CUcontext current = nullptr;
  if (current != context_) {
    if (api_->ctxSetCurrent(context_) == 0)
      current = context_;
  }
  return *api_;
}

Expected<CUdeviceptr> Driver::alloc(size_t bytes) {
  CUdeviceptr p = 0;
  K3_RETURN_IF_ERROR(check(api().memAlloc(&p, bytes ? bytes : 1), "cuMemAlloc")
                         .withContext(std::to_string(bytes) + " bytes"));
  return p;
}

void Driver::free(CUdeviceptr p) {
  if (p)
    api().memFree(p);
}

Status Driver::copyToDevice(CUdeviceptr dst, const void *src, size_t bytes) {
  return bytes ? check(api().memcpyHtoD(dst, src, bytes), "cuMemcpyHtoD")
               : Status::ok();
}

Status Driver::copyToHost(void *dst, CUdeviceptr src, size_t bytes) {
  return bytes ? check(api().memcpyDtoH(dst, src, bytes), "cuMemcpyDtoH")
               : Status::ok();
}

Status Driver::copyToDeviceAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                 CUstream stream) {
  return bytes ? check(api().memcpyHtoDAsync(dst, src, bytes, stream),
                       "cuMemcpyHtoDAsync")
               : Status::ok();
}

Status Driver::copyToHostAsync(void *dst, CUdeviceptr src, size_t bytes,
                               CUstream stream) {
  return bytes ? check(api().memcpyDtoHAsync(dst, src, bytes, stream),
                       "cuMemcpyDtoHAsync")
               : Status::ok();
}

Status Driver::memset8(CUdeviceptr dst, uint8_t value, size_t bytes) {
  return bytes ? check(api().memsetD8(dst, value, bytes), "cuMemsetD8")
               : Status::ok();
}

Status Driver::copyDeviceAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                               CUstream stream) {
  return bytes ? check(api().memcpyDtoDAsync(dst, src, bytes, stream),
                       "cuMemcpyDtoDAsync")
               : Status::ok();
}

Expected<CUmodule> Driver::loadModule(const std::string &ptx) {
  std::vector<char> log(16384, 0);
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSize};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size() - 1)};
  CUmodule m = nullptr;
  int r = api().moduleLoadDataEx(&m, ptx.c_str(), 2, options, values);
  if (r != 0)
    return check(r, "cuModuleLoadDataEx")
        .withContext(std::string("PTX JIT log: ") + log.data());
  return m;
}

void Driver::unloadModule(CUmodule module) {
  if (module)
    (void)api().moduleUnload(module);
}

Expected<std::pair<CUdeviceptr, size_t>>
Driver::global(CUmodule module, const std::string &name) {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  K3_RETURN_IF_ERROR(
      check(api().moduleGetGlobal(&p, &bytes, module, name.c_str()),
            "cuModuleGetGlobal")
          .withContext("module variable '" + name + "'"));
  return std::make_pair(p, bytes);
}

Expected<CUfunction> Driver::function(CUmodule module,
                                      const std::string &name) {
  CUfunction f = nullptr;
  K3_RETURN_IF_ERROR(check(api().moduleGetFunction(&f, module, name.c_str()),
                           "cuModuleGetFunction")
                         .withContext("kernel '" + name + "'"));
  return f;
}

Expected<int64_t> Driver::allowDynamicShared(CUfunction f) {
  int staticBytes = 0;
  K3_RETURN_IF_ERROR(
      check(api().funcGetAttribute(&staticBytes, kFuncAttrStaticShared, f),
            "cuFuncGetAttribute"));
  const int most = maxSmemOptin_ - staticBytes;
  K3_RETURN_IF_ERROR(
      check(api().funcSetAttribute(f, kFuncAttrMaxDynamicShared, most),
            "cuFuncSetAttribute"));
  return static_cast<int64_t>(most);
}

Status Driver::launch(CUfunction f, const int64_t grid[3],
                      const int64_t block[3], int64_t smem, CUstream stream,
                      void *params, bool programmatic, const int64_t *cluster) {
  void *args[] = {params};
  const bool pdl = programmatic && hasPdl_, cl = clustered(cluster);
  if (pdl || cl) {
    if (!api().launchKernelEx)
      return makeError("a launch in clusters of ", cluster[0], " x ",
                       cluster[1], " x ", cluster[2],
                       " blocks needs cuLaunchKernelEx, which the CUDA "
                       "driver lacks (CUDA 12.0+)");
    LaunchAttribute attrs[2];
    unsigned n = 0;
    if (pdl) {
      attrs[n] = LaunchAttribute{};
      attrs[n].id = kLaunchAttrProgrammaticStreamSerialization;
      attrs[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (cl)
      attrs[n++] = clusterAttribute(cluster);
    LaunchConfig c{};
    c.gridDimX = static_cast<unsigned>(grid[0]);
    c.gridDimY = static_cast<unsigned>(grid[1]);
    c.gridDimZ = static_cast<unsigned>(grid[2]);
    c.blockDimX = static_cast<unsigned>(block[0]);
    c.blockDimY = static_cast<unsigned>(block[1]);
    c.blockDimZ = static_cast<unsigned>(block[2]);
    c.sharedMemBytes = static_cast<unsigned>(smem);
    c.stream = stream;
    c.attrs = attrs;
    c.numAttrs = n;
    return check(api().launchKernelEx(&c, f, args, nullptr),
                 "cuLaunchKernelEx");
  }
  return check(
      api().launchKernel(
          f, static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
          static_cast<unsigned>(grid[2]), static_cast<unsigned>(block[0]),
          static_cast<unsigned>(block[1]), static_cast<unsigned>(block[2]),
          static_cast<unsigned>(smem), stream, args, nullptr),
      "cuLaunchKernel");
}

Expected<CUgraph> Driver::createGraph() {
  CUgraph g = nullptr;
  K3_RETURN_IF_ERROR(check(api().graphCreate(&g, 0), "cuGraphCreate"));
  return g;
}

Expected<CUgraphNode> Driver::addKernelNode(CUgraph graph, CUgraphNode after,
                                            CUfunction f, const int64_t grid[3],
                                            const int64_t block[3],
                                            int64_t smem, void *params,
                                            bool programmatic,
                                            const int64_t *cluster) {
  void *args[] = {params};
  KernelNodeParams p = nodeParams(f, grid, block, smem, args);
  CUgraphNode node = nullptr;
  const bool pdlEdge = programmatic && hasPdl_ && after;
  K3_RETURN_IF_ERROR(
      check(api().graphAddKernelNode(&node, graph,
                                     after && !pdlEdge ? &after : nullptr,
                                     after && !pdlEdge ? 1 : 0, &p),
            "cuGraphAddKernelNode"));
  if (pdlEdge) {
    GraphEdgeData edge{};
    edge.fromPort = kGraphKernelPortProgrammatic;
    edge.type = kGraphDependencyProgrammatic;
    K3_RETURN_IF_ERROR(
        check(api().graphAddDependencies(graph, &after, &node, &edge, 1),
              "cuGraphAddDependencies (programmatic edge)"));
  }
  if (clustered(cluster)) {
    if (!api().graphKernelNodeSetAttribute)
      return makeError("a graph node in clusters of blocks needs "
                       "cuGraphKernelNodeSetAttribute, which the CUDA driver "
                       "lacks (CUDA 12.0+)");
    const LaunchAttribute a = clusterAttribute(cluster);
    K3_RETURN_IF_ERROR(
        check(api().graphKernelNodeSetAttribute(node, a.id, &a.value),
              "cuGraphKernelNodeSetAttribute (cluster dimension)"));
  }
  return node;
}

Expected<CUgraphExec> Driver::instantiate(CUgraph graph) {
  CUgraphExec e = nullptr;
  K3_RETURN_IF_ERROR(
      check(api().graphInstantiate(&e, graph, 0), "cuGraphInstantiate"));
  return e;
}

Status Driver::setKernelNodeParams(CUgraphExec exec, CUgraphNode node,
                                   CUfunction f, const int64_t grid[3],
                                   const int64_t block[3], int64_t smem,
                                   void *params) {
  void *args[] = {params};
  KernelNodeParams p = nodeParams(f, grid, block, smem, args);
  return check(api().graphExecKernelNodeSetParams(exec, node, &p),
               "cuGraphExecKernelNodeSetParams");
}

Status Driver::launchGraph(CUgraphExec exec, CUstream stream) {
  return check(api().graphLaunch(exec, stream), "cuGraphLaunch");
}

void Driver::destroy(CUstream s) {
  if (s)
    api().streamDestroy(s);
}
void Driver::destroy(CUevent e) {
  if (e)
    api().eventDestroy(e);
}
void Driver::destroy(CUgraph g) {
  if (g && hasGraphs_)
    api().graphDestroy(g);
}
void Driver::destroy(CUgraphExec e) {
  if (e && hasGraphs_)
    api().graphExecDestroy(e);
}

Expected<CUstream> Driver::createStream() {
  CUstream s = nullptr;
  K3_RETURN_IF_ERROR(
      check(api().streamCreate(&s, kStreamNonBlocking), "cuStreamCreate"));
  return s;
}

Status Driver::synchronize(CUstream stream) {
  return check(api().streamSynchronize(stream), "cuStreamSynchronize");
}

Expected<CUevent> Driver::createEvent() {
  CUevent e = nullptr;
  K3_RETURN_IF_ERROR(
      check(api().eventCreate(&e, kEventDefault), "cuEventCreate"));
  return e;
}

Status Driver::record(CUevent e, CUstream stream) {
  return check(api().eventRecord(e, stream), "cuEventRecord");
}

Expected<float> Driver::elapsedMs(CUevent start, CUevent end) {
  K3_RETURN_IF_ERROR(check(api().eventSynchronize(end), "cuEventSynchronize"));
  float ms = 0;
  K3_RETURN_IF_ERROR(
      check(api().eventElapsedTime(&ms, start, end), "cuEventElapsedTime"));
  return ms;
}

//===----------------------------------------------------------------------===//
// DeviceBuffer
//===----------------------------------------------------------------------===//

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) {
    Expected<Driver *> d = Driver::get();
    if (d)
      (*d)->free(ptr_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&o) noexcept
    : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

Expected<DeviceBuffer> DeviceBuffer::create(size_t bytes) {
  Expected<Driver *> d = Driver::get();
  if (!d)
    return d.status();
  Expected<CUdeviceptr> p = (*d)->alloc(bytes);
  if (!p)
    return p.status();
  DeviceBuffer b;
  b.ptr_ = *p;
  b.bytes_ = bytes;
  return b;
}

Expected<DeviceBuffer> DeviceBuffer::upload(const void *data, size_t bytes) {
  Expected<DeviceBuffer> b = create(bytes);
  if (!b)
    return b;
  K3_RETURN_IF_ERROR((*Driver::get())->copyToDevice(b->get(), data, bytes));
  return b;
}

} // namespace cuda
} // namespace k3
