#include "engine/cpu/thread_pool.h"

#include <algorithm>

namespace plumb::engine {
namespace {

// Set on pool threads (and on a caller while it runs a job) so nested parallel_for runs inline.
thread_local bool t_in_pool_job = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// 2k pause iterations: ~48 us on an AMD Zen 5 (24 ns per pause); Intel documents ~140 cycles per
// pause since Skylake, i.e. longer. Long enough to catch
// back-to-back kernel calls of one forward pass and the gap between decode steps, short enough not
// to hold a core between requests.
constexpr int kSpinIterations = 2000;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  int n = std::max(threads, 1);
  workers_.reserve(size_t(n - 1));
  for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  wake_workers();
  for (auto& t : workers_) t.join();
}

int ThreadPool::chunks(int64_t n, int64_t align) const {
  if (n <= 0) return 0;
  align = std::max<int64_t>(align, 1);
  int64_t units = (n + align - 1) / align;
  // At most 0xffff chunks: the claim word holds the count in 16 bits.
  int64_t want = size() == 1 ? 1 : std::min<int64_t>(int64_t(size()) * kChunksPerThread, 0xffff);
  return int(std::min<int64_t>(units, want));
}

void ThreadPool::chunk_range(int64_t n, int64_t align, int i, int64_t* begin, int64_t* end) const {
  align = std::max<int64_t>(align, 1);
  int64_t units = (n + align - 1) / align;
  int c = chunks(n, align);
  // Units are spread as evenly as possible: the first (units % c) chunks get one more.
  int64_t base = units / c, extra = units % c;
  int64_t ub = i * base + std::min<int64_t>(i, extra);
  int64_t ue = ub + base + (i < extra ? 1 : 0);
  *begin = std::min(ub * align, n);
  *end = std::min(ue * align, n);
}

void ThreadPool::drain(uint32_t gen) {
  uint64_t v = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (uint32_t(v >> 32) != gen) return;  // a newer job (or none) is published
    // The chunk count travels in the atomic: reading job_chunks_ here could see the next job's.
    const int chunk = int(v & 0xffffu), total = int((v >> 16) & 0xffffu);
    if (chunk >= total) return;
    if (!claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    int64_t b, e;
    chunk_range(job_n_, job_align_, chunk, &b, &e);
    job_fn_(job_ctx_, b, e);
    done_.fetch_add(1, std::memory_order_acq_rel);
    v = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(int64_t n, int64_t align, Trampoline t, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || t_in_pool_job || chunks(n, align) == 1) {
    t(ctx, 0, n);
    return;
  }
  std::lock_guard<std::mutex> lock(call_mu_);
  job_fn_ = t;
  job_ctx_ = ctx;
  job_n_ = n;
  job_align_ = align;
  job_chunks_ = chunks(n, align);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store(uint64_t(gen) << 32 | uint64_t(job_chunks_) << 16, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  wake_workers();

  t_in_pool_job = true;
  drain(gen);
  t_in_pool_job = false;

  // Chunks claimed by workers may still be running; they are short relative to a kernel call.
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != job_chunks_) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::wake_workers() {
  // Taking the mutex after the store orders it against a worker's predicate check: the worker
  // either sees the new generation or is already waiting when notify_all runs.
  { std::lock_guard<std::mutex> lock(sleep_mu_); }
  sleep_cv_.notify_all();
}

void ThreadPool::worker_main() {
  t_in_pool_job = true;
  // Generation 0 is the constructor's; reading generation_ here instead would race with a first job
  // published before this thread started.
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int spins = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        cpu_relax();
      } else {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleep_cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    drain(g);
  }
}

}  // namespace plumb::engine
