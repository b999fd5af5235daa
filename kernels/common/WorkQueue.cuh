//===- WorkQueue.cuh - One-launch work queues across the grid -*- CUDA -*-===//
//
// A kernel whose work has a dependency across the grid (every block needs
// what all blocks of an earlier phase wrote) runs both phases in one launch
// with a work queue instead of a grid barrier: blocks draw numbered items
// from an atomic ticket (the first phase's items first); a finished item is
// counted with a release; a block that draws a later-phase item waits
// (acquire) until the items it needs are counted. Tickets are drawn in
// order by running blocks and an item only waits for items of lower
// tickets, so every awaited item belongs to a block that is running and
// waits on nothing later: no deadlock with any grid, and no cooperative
// launch needed. The last block out resets the counters, so the next launch
// finds them zero (module scratch: two launches of one kernel must not run
// concurrently in one context; the runtime's one stream satisfies it).
//
// Used by moe (gated_mlp, moe_experts, moe_ffn) and mla (mla_attend).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_WORKQUEUE_CUH
#define K3C_KERNELS_COMMON_WORKQUEUE_CUH

namespace k3 {
namespace dev {

/// The work queue of one kernel (see the file comment). Zero at module load;
/// the last block of every launch zeroes it again.
struct WorkQueue {
  unsigned ticket; ///< next item to hand out
  unsigned done;   ///< finished items the last phase waits for
  unsigned exited; ///< blocks that have left
};

/// Acquire load of a work-queue counter (pairs with addRelease).
__device__ __forceinline__ unsigned ldAcquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
               : "=r"(v)
               : "l"(__cvta_generic_to_global(p))
               : "memory");
  return v;
}
/// Release add to a work-queue counter (pairs with ldAcquire).
__device__ __forceinline__ void addRelease(unsigned *p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(
                   __cvta_generic_to_global(p)),
               "r"(v)
               : "memory");
}

/// The next item for this block (thread 0 draws, the block shares it).
__device__ __forceinline__ unsigned nextItem(WorkQueue &wq, unsigned *slot) {
  if (threadIdx.x == 0)
    *slot = atomicAdd(&wq.ticket, 1u);
  __syncthreads();
  const unsigned item = *slot;
  __syncthreads(); // the slot is rewritten by the next draw
  return item;
}

/// Counts a finished item in counter `c`; its stores (by any thread of the
/// block) are ordered before by the barrier and the release.
__device__ __forceinline__ void finishItem(unsigned *c) {
  __syncthreads();
  if (threadIdx.x == 0)
    addRelease(c, 1u);
}

/// Waits until counter `c` of the queue reaches `items`.
__device__ __forceinline__ void awaitCount(const unsigned *c, unsigned items) {
  if (threadIdx.x == 0)
    while (ldAcquire(c) < items)
      __nanosleep(128);
  __syncthreads();
}

/// Leaves the queue; the last block out zeroes it, and the `extra`
/// counters, for the next launch (every other block has left by then), and
/// returns true.
__device__ __forceinline__ bool leaveQueue(WorkQueue &wq,
                                           unsigned *extra = nullptr,
                                           int extraCount = 0) {
  __shared__ int lastOut;
  __syncthreads();
  if (threadIdx.x == 0)
    lastOut = atomicAdd(&wq.exited, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!lastOut)
    return false;
  for (int i = threadIdx.x; i < extraCount; i += blockDim.x)
    atomicExch(extra + i, 0u);
  if (threadIdx.x == 0) {
    atomicExch(&wq.ticket, 0u);
    atomicExch(&wq.done, 0u);
    atomicExch(&wq.exited, 0u);
  }
  return true;
}

} // namespace dev
} // namespace k3

#endif // K3C_KERNELS_COMMON_WORKQUEUE_CUH
