//===- FakeCudaDriver.cpp - A libcuda for the CUDA backend's host code ----===//
//
// The CUDA backend's host code (binding, rows, slots, graphs, scratch, the
// error paths) otherwise runs only where a GPU is lent. This shared library
// exports the driver entry points runtime/exec/cuda/CudaDriver.cpp resolves,
// with host memory as "device" memory and launches that run nothing, so
// that CI runs that host code, under the sanitizers too
// (runtime_cuda_host_test loads it through K3C_CUDA_DRIVER). What it checks
// as a real driver would: a context current on the calling thread (else
// CUDA_ERROR_INVALID_CONTEXT), live handles (a freed buffer, an unloaded
// module's function, a destroyed stream are errors), a kernel name its
// module's PTX declares. What it counts: live allocations, modules, streams,
// events, graphs, and launches, for the tests' leak and launch checks
// (k3fake_stats). An allocation can be made to fail (k3fake_fail_alloc_after)
// (k3fake_fail_launch_after, likewise a launch; or K3C_FAKE_FAIL_ALLOC_AFTER
// / K3C_FAKE_FAIL_LAUNCH_AFTER for a whole run) to exercise the callers'
// error paths. Kernels never run: memory is zeroed
// at allocation and stays so, unless copied or set.
//
//===----------------------------------------------------------------------===//
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <sys/mman.h>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
/// Allocations of at least this many bytes are mapped, not allocated.
constexpr size_t kMapBytes = size_t(1) << 20;
constexpr CUresult kOk = 0, kInvalidValue = 1, kOutOfMemory = 2,
                   kInvalidContext = 201, kInvalidHandle = 400, kNotFound = 500;

/// What a test reads back (k3fake_stats).
struct Stats {
  long long liveAllocs, liveBytes, liveModules, moduleLoads, launches,
      graphLaunches, liveStreams, liveEvents, liveGraphs, liveExecs,
      liveFunctions;
};

struct Fake {
  std::mutex mutex;
  std::map<CUdeviceptr, size_t> allocs;
  std::map<void *, std::string> modules;                  ///< handle -> PTX
  std::map<void *, std::pair<void *, std::string>> funcs; ///< module, name
  std::set<void *> streams, events, graphs, execs;
  std::map<void *, std::chrono::steady_clock::time_point> recorded;
  long long moduleLoads = 0, launches = 0, graphLaunches = 0;
  std::map<std::string, long long> launchesOf; ///< by kernel name
  long long failAllocAfter = -1;  ///< allocations left before one fails
  long long failLaunchAfter = -1; ///< launches (and graph launches) likewise
  uintptr_t nextHandle = 0x1000;
  void *handle() { return reinterpret_cast<void *>(nextHandle += 16); }
};

/// K3C_FAKE_FAIL_<what>_AFTER=N in the environment: the failure counters'
/// start (for a whole tool run over the fake driver).
long long envCount(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoll(v) : -1;
}

Fake &fake() {
  static Fake *f = [] {
    Fake *n = new Fake(); // never destroyed: backends outlive main
    n->failAllocAfter = envCount("K3C_FAKE_FAIL_ALLOC_AFTER");
    n->failLaunchAfter = envCount("K3C_FAKE_FAIL_LAUNCH_AFTER");
    return n;
  }();
  return *f;
}

char gContext; ///< the primary context's identity
thread_local void *tCurrent = nullptr;

#define K3FAKE_NEEDS_CONTEXT()                                                 \
  do {                                                                         \
    if (tCurrent != &gContext)                                                 \
      return kInvalidContext;                                                  \
  } while (0)

bool inAlloc(Fake &f, CUdeviceptr p, size_t bytes) {
  auto it = f.allocs.upper_bound(p);
  if (it == f.allocs.begin())
    return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

/// A launch: the function must be live, its module loaded, its params
/// readable (one byte each read, so that the sanitizers see a dangling one).
CUresult launch(void *f, void **args) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &fk = fake();
  std::lock_guard<std::mutex> lock(fk.mutex);
  auto it = fk.funcs.find(f);
  if (it == fk.funcs.end() || !fk.modules.count(it->second.first))
    return kInvalidHandle;
  if (!args || !args[0])
    return kInvalidValue;
  volatile char first = *static_cast<const char *>(args[0]);
  (void)first;
  if (fk.failLaunchAfter == 0)
    return kInvalidValue; // as a launch the device refuses (not sticky)
  if (fk.failLaunchAfter > 0)
    --fk.failLaunchAfter;
  ++fk.launches;
  ++fk.launchesOf[it->second.second];
  return kOk;
}

/// A copy touching `bytes` at `dev`, which must lie in one live allocation.
CUresult copy(void *dst, const void *src, size_t bytes, CUdeviceptr dev) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    if (!inAlloc(f, dev, bytes))
      return kInvalidValue;
  }
  std::memmove(dst, src, bytes);
  return kOk;
}
/// A kernel node's params (CUDA_KERNEL_NODE_PARAMS_v2's leading fields).
struct NodeParams {
  void *func;
  unsigned grid[3], block[3], smem;
  void **kernelParams;
};

} // namespace

extern "C" {

CUresult cuInit(unsigned) { return kOk; }
CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return kOk;
}
CUresult cuDeviceGet(int *d, int ordinal) {
  if (ordinal != 0)
    return kInvalidValue;
  *d = 0;
  return kOk;
}
CUresult cuDeviceGetName(char *name, int len, int) {
  std::strncpy(name, "k3c fake driver", static_cast<size_t>(len));
  return kOk;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int) {
  switch (attr) {
  case 75: // compute capability major
    *v = 9;
    return kOk;
  case 76: // minor
    *v = 0;
    return kOk;
  case 16: // multiprocessors
    *v = 132;
    return kOk;
  case 97: // max shared memory per block, opt-in
    *v = 232448;
    return kOk;
  default:
    *v = 0;
    return kOk;
  }
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int) {
  *ctx = &gContext;
  return kOk;
}
CUresult cuCtxSetCurrent(void *ctx) {
  tCurrent = ctx;
  return kOk;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.failAllocAfter == 0)
    return kOutOfMemory;
  if (f.failAllocAfter > 0)
    --f.failAllocAfter;
  // Large buffers mapped (zero pages until touched: a model of many GB
  // binds in little memory, as no kernel writes them), small ones from the
  // heap (the sanitizers see an overflow of those).
  void *m = nullptr;
  if (bytes >= kMapBytes) {
    m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
      return kOutOfMemory;
  } else {
    m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m)
      return kOutOfMemory;
    std::memset(m, 0, bytes);
  }
  *p = reinterpret_cast<CUdeviceptr>(m);
  f.allocs[*p] = bytes;
  return kOk;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  auto it = f.allocs.find(p);
  if (it == f.allocs.end())
    return kInvalidValue;
  if (it->second >= kMapBytes)
    ::munmap(reinterpret_cast<void *>(p), it->second);
  else
    std::free(reinterpret_cast<void *>(p));
  f.allocs.erase(it);
  return kOk;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
  return copy(reinterpret_cast<void *>(d), s, n, d);
}
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
  return copy(d, reinterpret_cast<const void *>(s), n, s);
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *) {
  return copy(d, reinterpret_cast<const void *>(s), n, s);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *) {
  return copy(reinterpret_cast<void *>(d), s, n, d);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *) {
  {
    Fake &f = fake();
    std::lock_guard<std::mutex> lock(f.mutex);
    if (!inAlloc(f, s, n))
      return kInvalidValue;
  }
  return copy(reinterpret_cast<void *>(d), reinterpret_cast<const void *>(s), n,
              d);
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    if (!inAlloc(f, d, n))
      return kInvalidValue;
  }
  std::memset(reinterpret_cast<void *>(d), v, n);
  return kOk;
}

CUresult cuModuleLoadDataEx(void **m, const void *ptx, unsigned, int *,
                            void **) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  *m = f.handle();
  f.modules[*m] = static_cast<const char *>(ptx);
  ++f.moduleLoads;
  return kOk;
}
CUresult cuModuleGetFunction(void **fn, void *m, const char *name) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  auto it = f.modules.find(m);
  if (it == f.modules.end())
    return kInvalidHandle;
  if (it->second.find(std::string(".entry ") + name + "(") == std::string::npos)
    return kNotFound;
  *fn = f.handle();
  f.funcs[*fn] = {m, name};
  return kOk;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr *, size_t *, void *, const char *) {
  return kNotFound;
}
CUresult cuModuleUnload(void *m) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.modules.erase(m))
    return kInvalidHandle;
  for (auto it = f.funcs.begin(); it != f.funcs.end();)
    it = it->second.first == m ? f.funcs.erase(it) : std::next(it);
  return kOk;
}
CUresult cuFuncSetAttribute(void *, int, int) { return kOk; }
CUresult cuFuncGetAttribute(int *v, int, void *) {
  *v = 0;
  return kOk;
}

CUresult cuLaunchKernel(void *f, unsigned, unsigned, unsigned, unsigned,
                        unsigned, unsigned, unsigned, void *, void **args,
                        void **) {
  return launch(f, args);
}
CUresult cuLaunchKernelEx(const void *, void *f, void **args, void **) {
  return launch(f, args);
}

CUresult cuStreamCreate(void **s, unsigned) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  *s = f.handle();
  f.streams.insert(*s);
  return kOk;
}
CUresult cuStreamSynchronize(void *s) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  return !s || f.streams.count(s) ? kOk : kInvalidHandle;
}
CUresult cuStreamDestroy_v2(void *s) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  return f.streams.erase(s) ? kOk : kInvalidHandle;
}
CUresult cuEventCreate(void **e, unsigned) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  *e = f.handle();
  f.events.insert(*e);
  return kOk;
}
CUresult cuEventRecord(void *e, void *) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.events.count(e))
    return kInvalidHandle;
  f.recorded[e] = std::chrono::steady_clock::now();
  return kOk;
}
CUresult cuEventSynchronize(void *e) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  return f.events.count(e) ? kOk : kInvalidHandle;
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.recorded.count(a) || !f.recorded.count(b))
    return kInvalidHandle;
  *ms = std::chrono::duration<float, std::milli>(f.recorded[b] - f.recorded[a])
            .count();
  return kOk;
}
CUresult cuEventDestroy_v2(void *e) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.recorded.erase(e);
  return f.events.erase(e) ? kOk : kInvalidHandle;
}
CUresult cuGetErrorName(CUresult r, const char **name) {
  switch (r) {
  case kOutOfMemory:
    *name = "CUDA_ERROR_OUT_OF_MEMORY";
    return kOk;
  case kInvalidContext:
    *name = "CUDA_ERROR_INVALID_CONTEXT";
    return kOk;
  case kInvalidHandle:
    *name = "CUDA_ERROR_INVALID_HANDLE";
    return kOk;
  default:
    *name = "CUDA_ERROR (k3c fake driver)";
    return kOk;
  }
}

CUresult cuGraphCreate(void **g, unsigned) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  *g = f.handle();
  f.graphs.insert(*g);
  return kOk;
}
/// The node's function must be live and its params given.
CUresult cuGraphAddKernelNode_v2(void **node, void *g, const void *, size_t,
                                 const void *params) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.graphs.count(g) || !params)
    return kInvalidHandle;
  const NodeParams &p = *static_cast<const NodeParams *>(params);
  if (!f.funcs.count(p.func) || !p.kernelParams || !p.kernelParams[0])
    return kInvalidValue;
  *node = f.handle();
  return kOk;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.graphs.count(g))
    return kInvalidHandle;
  *exec = f.handle();
  f.execs.insert(*exec);
  return kOk;
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *,
                                           const void *params) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.execs.count(exec) || !params)
    return kInvalidHandle;
  const NodeParams &p = *static_cast<const NodeParams *>(params);
  if (!f.funcs.count(p.func) || !p.kernelParams || !p.kernelParams[0])
    return kInvalidValue;
  volatile char first = *static_cast<const char *>(p.kernelParams[0]);
  (void)first;
  return kOk;
}
CUresult cuGraphLaunch(void *exec, void *) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.execs.count(exec))
    return kInvalidHandle;
  if (f.failLaunchAfter == 0)
    return kInvalidValue;
  if (f.failLaunchAfter > 0)
    --f.failLaunchAfter;
  ++f.graphLaunches;
  return kOk;
}
CUresult cuGraphDestroy(void *g) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  return f.graphs.erase(g) ? kOk : kInvalidHandle;
}
CUresult cuGraphExecDestroy(void *exec) {
  K3FAKE_NEEDS_CONTEXT();
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  return f.execs.erase(exec) ? kOk : kInvalidHandle;
}
CUresult cuGraphAddDependencies_v2(void *, const void *, const void *,
                                   const void *, size_t) {
  K3FAKE_NEEDS_CONTEXT();
  return kOk;
}
CUresult cuGraphKernelNodeSetAttribute(void *, int, const void *) {
  K3FAKE_NEEDS_CONTEXT();
  return kOk;
}

/// The counters above, for the tests.
void k3fake_stats(Stats *out) {
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  long long bytes = 0;
  for (const auto &[p, n] : f.allocs)
    bytes += static_cast<long long>(n);
  *out = {static_cast<long long>(f.allocs.size()),
          bytes,
          static_cast<long long>(f.modules.size()),
          f.moduleLoads,
          f.launches,
          f.graphLaunches,
          static_cast<long long>(f.streams.size()),
          static_cast<long long>(f.events.size()),
          static_cast<long long>(f.graphs.size()),
          static_cast<long long>(f.execs.size()),
          static_cast<long long>(f.funcs.size())};
}

/// Launches of the kernel called `name` (e.g. "k3_moe_chunk_route") so far,
/// graph replays not counted.
long long k3fake_launches_of(const char *name) {
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  auto it = f.launchesOf.find(name);
  return it == f.launchesOf.end() ? 0 : it->second;
}

/// The next `n` launches (kernels or graphs) succeed and the one after
/// fails with CUDA_ERROR_INVALID_VALUE (n < 0: none fails).
void k3fake_fail_launch_after(long long n) {
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.failLaunchAfter = n;
}

/// The next `n` allocations succeed and the one after fails (n < 0: none
/// fails).
void k3fake_fail_alloc_after(long long n) {
  Fake &f = fake();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.failAllocAfter = n;
}

} // extern "C"
