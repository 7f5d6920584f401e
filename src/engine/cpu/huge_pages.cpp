#include "engine/cpu/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace plumb::engine {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) {
  const size_t len = (bytes + 4095) / 4096 * 4096;
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const uintptr_t end = start + len, raw_end = base + len + kHugePage;
  if (start > base) ::munmap(raw, start - base);                             // the unaligned head
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);  // the excess tail
  p_ = reinterpret_cast<void*>(start);
  len_ = len;
  ::madvise(p_, len_, MADV_HUGEPAGE);  // advice: without THP the mapping works with 4 KiB pages
}

HugeBuffer::~HugeBuffer() {
  if (p_) ::munmap(p_, len_);
}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) ::munmap(p_, len_);
    p_ = std::exchange(o.p_, nullptr);
    len_ = std::exchange(o.len_, 0);
  }
  return *this;
}

}  // namespace plumb::engine
