#include "engine/cpu/packed.h"

#include <cstring>
#include <vector>

#include "engine/cpu/thread_pool.h"

namespace plumb::engine {

bool can_pack16(const WeightMatrix& w) {
  return w.quant == QuantScheme::kNone && w.dtype == DType::kBF16 && w.rows > 0 && w.rows % 16 == 0 &&
         w.cols % 2 == 0;
}

namespace {

// One 16-row group (16 * cols elements) through a temporary, so src may equal dst. The pairs move
// as 32-bit units: pair q of row l sits at (q * 16 + l) in the packed group.
template <bool Pack>
void convert_group(const uint16_t* src, int64_t cols, uint16_t* dst, std::vector<uint32_t>& tmp) {
  const int64_t pairs = cols / 2, n = 16 * pairs;
  tmp.resize(size_t(n));
  std::memcpy(tmp.data(), src, size_t(n) * 4);
  auto* out = reinterpret_cast<uint32_t*>(dst);  // 4-byte units; the buffers are at least 4-aligned
  for (int64_t l = 0; l < 16; ++l) {
    for (int64_t q = 0; q < pairs; ++q) {
      if constexpr (Pack) {
        out[q * 16 + l] = tmp[size_t(l * pairs + q)];
      } else {
        out[l * pairs + q] = tmp[size_t(q * 16 + l)];
      }
    }
  }
}

template <bool Pack>
void convert(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst, ThreadPool* pool) {
  auto part = [&](int64_t g0, int64_t g1) {
    std::vector<uint32_t> tmp;
    for (int64_t g = g0; g < g1; ++g)
      convert_group<Pack>(src + g * 16 * cols, cols, dst + g * 16 * cols, tmp);
  };
  if (pool) {
    pool->parallel_for(rows / 16, part);
  } else {
    part(0, rows / 16);
  }
}

}  // namespace

void pack16(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst, ThreadPool* pool) {
  convert<true>(src, rows, cols, dst, pool);
}

void unpack16(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst, ThreadPool* pool) {
  convert<false>(src, rows, cols, dst, pool);
}

void read_row_bf16(const WeightMatrix& w, int64_t r, uint16_t* out) {
  const auto* p = static_cast<const uint16_t*>(w.data);
  if (w.layout == WeightLayout::kRowMajor) {
    std::memcpy(out, p + r * w.cols, size_t(w.cols) * 2);
    return;
  }
  const uint16_t* g = p + packed16_index(r, 0, w.cols);  // pair 0 of row r; pair q is 32 elements on
  for (int64_t q = 0; q < w.cols / 2; ++q) {
    out[2 * q] = g[q * 32];
    out[2 * q + 1] = g[q * 32 + 1];
  }
}

void embedding_bf16_any_layout(const int32_t* ids, int64_t tokens, const WeightMatrix& table, float* x) {
  std::vector<uint16_t> row(size_t(table.cols));
  for (int64_t t = 0; t < tokens; ++t) {
    read_row_bf16(table, ids[t], row.data());
    float* o = x + t * table.cols;
    for (int64_t c = 0; c < table.cols; ++c) o[c] = bf16_to_f32(row[size_t(c)]);
  }
}

}  // namespace plumb::engine
