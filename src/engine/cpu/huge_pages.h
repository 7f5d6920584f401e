// Memory for data that is streamed whole (model weights, the bandwidth probe): its own mapping,
// starting on a 2 MiB boundary and advised MADV_HUGEPAGE, so that with transparent huge pages
// ("madvise" or "always") the kernel backs every whole 2 MiB range with one huge page: a decode step
// streams ~1 GB, which with 4 KiB pages is a TLB miss every 4 KiB. Batch-16 decode reads 0.596 of
// its roofline against 0.566 with 4 KiB pages (medians of 5 alternating rounds on a 2-core AMD EPYC;
// batch 1 the same within noise). The tail past the last 2 MiB boundary keeps 4 KiB pages, so
// nothing beyond the requested bytes becomes resident.
#pragma once

#include <cstddef>

namespace plumb::engine {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // bytes > 0; data() is null if the mapping failed (out of address space or memory).
  explicit HugeBuffer(size_t bytes);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept : p_(o.p_), len_(o.len_) { o.p_ = nullptr, o.len_ = 0; }
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  void* data() const { return p_; }
  size_t mapped_bytes() const { return len_; }

 private:
  void* p_ = nullptr;
  size_t len_ = 0;
};

}  // namespace plumb::engine
