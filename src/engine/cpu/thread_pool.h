// A small fixed-size thread pool for the engine's kernels.
//
// parallel_for(n, fn) splits [0, n) into contiguous chunks (up to kChunksPerThread per thread) and
// calls fn(begin, end) on each; threads, the caller included, claim chunks dynamically, so a thread
// that the OS deschedules (a busy VM) does not hold the others up. Returns when every chunk is done.
// Contract:
//  - The thread count (caller included) is fixed at construction; size() >= 1. ThreadPool(1) runs
//    everything on the caller and starts no thread.
//  - No allocation per call: fn is passed by reference through a type-erased pointer, never copied.
//  - Calls from several threads are serialized (one parallel_for runs at a time). A nested call
//    from inside fn (on any pool thread) runs inline on that thread, so nesting cannot deadlock.
//  - Idle workers spin briefly (2,000 pauses: ~50 us on AMD Zen 5, longer on Intel cores since
//    Skylake at Intel's ~140 cycles per pause) and then block on a condition variable, so a pool
//    does not burn a core between requests.
//  - fn must not throw (kernels do not): an exception escaping fn terminates the program.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace plumb::engine {

class ThreadPool {
 public:
  // threads: total threads including the caller; values < 1 are treated as 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static constexpr int kChunksPerThread = 4;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n). Chunk boundaries are multiples of
  // `align` (except the last end == n), so a kernel can keep its vector tiles whole. n <= 0: no call.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn, int64_t align = 1) {
    using F = std::remove_reference_t<Fn>;
    run(
        n, align, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Number of chunks parallel_for(n, ..., align) uses, and chunk i's range (any thread may run any
  // chunk); exposed for tests and for callers that size per-chunk scratch.
  int chunks(int64_t n, int64_t align = 1) const;
  void chunk_range(int64_t n, int64_t align, int i, int64_t* begin, int64_t* end) const;

 private:
  using Trampoline = void (*)(void*, int64_t, int64_t);
  void run(int64_t n, int64_t align, Trampoline t, void* ctx);
  void worker_main();
  // Claims and runs chunks of job `gen` until none is left.
  void drain(uint32_t gen);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes parallel_for callers
  // The current job: fields written by the caller before it publishes claim_ = generation (bits
  // 32..63) | chunk count (16..31) | next chunk (0..15); a claim is a CAS of the whole word, so a
  // late worker can never claim a chunk of a newer job by mistake.
  Trampoline job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_align_ = 1;
  int job_chunks_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};             // chunks of the current job finished
  std::atomic<uint32_t> generation_{0};  // bumped once per published job (and at shutdown)
  std::atomic<bool> stop_{false};
  // Idle workers sleep on a condition variable, not std::atomic::wait: libstdc++ 12's atomic wait
  // can lose a wake-up (it re-reads the value after its spin), which hung the destructor.
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  void wake_workers();
};

}  // namespace plumb::engine
