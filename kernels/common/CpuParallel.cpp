//===- CpuParallel.cpp - Row-parallel loops for the CPU kernels -----------===//
#include "kernels/common/CpuParallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {
namespace cpu {

namespace {

/// Below this many multiply-adds a GEMV stays serial (a few hundred µs of
/// work: waking threads costs tens of µs).
constexpr int64_t kMinParallelWork = int64_t(1) << 22;

class Pool {
public:
  static Pool &get() {
    static Pool pool;
    return pool;
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, const std::function<void(int64_t, int64_t)> &fn) {
    std::lock_guard<std::mutex> one(runMutex_); // one job at a time
    const int64_t chunks = std::min<int64_t>(n, threads() * 4);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_ = 0;
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ == chunks_; });
    fn_ = nullptr;
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : workers_)
      t.join();
  }

private:
  Pool() {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char *env = std::getenv("K3C_CPU_THREADS"))
      n = std::atoi(env);
    n = std::max(1, std::min(n, 256));
    for (int i = 1; i < n; ++i)
      workers_.emplace_back([this] { loop(); });
  }

  /// Takes chunks of the current job until none is left. The job is read
  /// under the lock: a worker that wakes late finds either nothing to do or
  /// the next job, never a half-written one.
  void work() {
    for (;;) {
      const std::function<void(int64_t, int64_t)> *fn;
      int64_t begin, end;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!fn_ || next_ >= chunks_)
          return;
        const int64_t c = next_++;
        fn = fn_;
        begin = n_ * c / chunks_;
        end = n_ * (c + 1) / chunks_;
      }
      (*fn)(begin, end);
      std::lock_guard<std::mutex> lock(mutex_);
      if (++done_ == chunks_)
        finished_.notify_all();
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_)
          return;
        seen = generation_;
      }
      work();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex runMutex_, mutex_;
  std::condition_variable wake_, finished_;
  const std::function<void(int64_t, int64_t)> *fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  int64_t next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

} // namespace

int cpuThreads() { return Pool::get().threads(); }

void parallelRows(int64_t n, int64_t work,
                  const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  if (n == 1 || work < kMinParallelWork || Pool::get().threads() == 1) {
    fn(0, n);
    return;
  }
  Pool::get().run(n, fn);
}

} // namespace cpu
} // namespace k3
