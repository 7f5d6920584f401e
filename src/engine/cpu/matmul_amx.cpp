// matmul "amx_bf16": y[m, n] = x[m, k] · W[n, k]ᵀ (+ bias) on Intel AMX tiles, for bf16 weights in
// WeightLayout::kPacked16 (engine/cpu/packed.h) with k a multiple of 32.
//
// Why the packed layout: an AMX B tile is 16 rows of 64 bytes, each row one pair of inputs for 16
// output features (the "VNNI" pairing TDPBF16PS reads). That is exactly 16 consecutive 32-element
// units of a kPacked16 feature group, so a B tile is 1 KiB of contiguous weights, read front to back,
// and no weight is ever rearranged at run time.
//
// The scheme: x is rounded to bf16 (as "avx512_bf16" does: the bf16-activation numeric class, bound
// 2^-8 · Σ|x·w|). Up to 16 rows the accumulator and A tiles are configured exactly m rows tall;
// above, x is padded with zero rows to a multiple of 16, the A tiles' height. Each
// output element is TDPBF16PS over k in steps of 32 in increasing order, starting from zero, stored
// to f32 between k chunks (exact), whatever the tile blocking: a row's result depends on its own x
// row only, so outputs are batch- and phase-invariant as the other kernels' are.
//  - m <= 16 (decode): one A tile, four B tiles (64 features, four weight streams) per k step;
//    weights stream from DRAM and compute is negligible (a 16x16x32 TDPBF16PS per KiB of weights).
//  - m > 16 (prefill): 2x2 tiles (32 rows x 32 features) per k step, k in chunks and x rows in
//    groups sized to stay in L2 while the feature blocks pass over them.
// Output features are split over the pool in 16-feature groups. Anything else (other dtypes, the
// row-major layout, k % 32 != 0) goes to "avx512_bf16" (matmul_avx512.cpp), the same numeric class.
//
// AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM, process-wide): the variant is
// supported only where the CPU has AMX-TILE and AMX-BF16, AVX512_BF16 (the fallback), and the
// request succeeds. Each call loads the tile configuration on every thread it runs on and releases
// the tiles at the end, so threads outside a matmul carry no AMX state.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"

#define PLUMB_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

namespace plumb::engine::avx512 {
bool cpu_has_avx512_bf16();
void round_to_bf16(const float* x, int64_t count, uint16_t* out);  // nearest even
void matmul_bf16(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                 const float* bias, float* y);
}  // namespace plumb::engine::avx512

namespace plumb::engine::amx {

namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: request permission for an XSTATE feature
constexpr long kXfeatureXtiledata = 18;     // the AMX tile data state

bool request_permission() {
  // CPUID leaf 7: EDX bit 22 is AMX-BF16, bit 24 AMX-TILE (read directly: not every compiler
  // that checks this file knows the feature names of __builtin_cpu_supports).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 22)) == 0 || (d & (1u << 24)) == 0) return false;
  if (!avx512::cpu_has_avx512_bf16()) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The 64-byte LDTILECFG operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: f32 accumulators, 4: A (x), 5: A (x, 2x2 blocks) or B, 6-7: B (weights); every tile
// 64 bytes wide. The accumulators and tile 4 hold `rows` rows (1..16: fewer than 16 in decode, so
// that no padding row is read or written); tiles 5-7 hold 16 (a B tile's 16 pairs of inputs; the
// 2x2 blocks, which use tile 5 as A, run with rows == 16 only).
PLUMB_AMX void configure_tiles(int rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = uint8_t(t < 5 ? rows : 16);
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

constexpr int64_t kTileK = 32;                // inputs per TDPBF16PS
constexpr int64_t kBTileElems = 16 * kTileK;  // one B tile: 16 features x 32 inputs, 1 KiB
// Decode: feature groups per block. Each is its own stream of weights from DRAM; with TILELOADD
// blocking on its data and no tile renaming, the streams in flight are what keeps the memory
// busy: on 2 threads of a Xeon with AMX (Qwen2.5-0.5B's matrices), 1 stream reads 0.54 of the
// read bandwidth, 2 streams 0.74, 4 streams 0.84 (BENCHMARKS.md "Engine kernels"); software
// prefetch on top of 4 streams lowers it (0.71-0.77).
constexpr int64_t kDecodeGroups = 4;
constexpr int64_t kChunkK = 1024;           // prefill: inputs per k chunk
constexpr int64_t kGroupBytes = 512 << 10;  // prefill: bytes of x rows per group (kept in L2)

// One 16-row block of x against NR (1..4) feature groups at w (the first group's element 0; groups
// `group` elements apart), k chunk [q0, q1) in units of 32 inputs. Accumulates into y (f32,
// row stride ldy, NR * 16 columns), loading it first unless `first`.
template <int NR>
PLUMB_AMX void block_1xN(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t group, int64_t q0,
                         int64_t q1, bool first, float* y, int64_t ldy) {
  static_assert(NR >= 1 && NR <= 4);
  const int64_t sy = ldy * 4;
  if (first) {
    _tile_zero(0);
    if constexpr (NR > 1) _tile_zero(1);
    if constexpr (NR > 2) _tile_zero(2);
    if constexpr (NR > 3) _tile_zero(3);
  } else {
    _tile_loadd(0, y, sy);
    if constexpr (NR > 1) _tile_loadd(1, y + 16, sy);
    if constexpr (NR > 2) _tile_loadd(2, y + 32, sy);
    if constexpr (NR > 3) _tile_loadd(3, y + 48, sy);
  }
  for (int64_t q = q0; q < q1; ++q) {
    const uint16_t* b = w + q * kBTileElems;
    _tile_loadd(4, x + q * kTileK, ldx * 2);
    _tile_loadd(5, b, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NR > 1) {
      _tile_loadd(6, b + group, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NR > 2) {
      _tile_loadd(7, b + 2 * group, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NR > 3) {
      _tile_loadd(5, b + 3 * group, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, y, sy);
  if constexpr (NR > 1) _tile_stored(1, y + 16, sy);
  if constexpr (NR > 2) _tile_stored(2, y + 32, sy);
  if constexpr (NR > 3) _tile_stored(3, y + 48, sy);
}

// Two 16-row blocks of x (32 rows) against two feature groups: four accumulators, each A and B
// tile used twice per k step. Same contract as block_1xN.
PLUMB_AMX void block_2x2(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t group, int64_t q0,
                         int64_t q1, bool first, float* y, int64_t ldy) {
  const int64_t sy = ldy * 4;
  float* y1 = y + 16 * ldy;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, y, sy);
    _tile_loadd(1, y + 16, sy);
    _tile_loadd(2, y1, sy);
    _tile_loadd(3, y1 + 16, sy);
  }
  const uint16_t* x1 = x + 16 * ldx;
  for (int64_t q = q0; q < q1; ++q) {
    const uint16_t* b = w + q * kBTileElems;
    _tile_loadd(4, x + q * kTileK, ldx * 2);
    _tile_loadd(6, b, 64);
    _tile_loadd(5, x1 + q * kTileK, ldx * 2);
    _tile_loadd(7, b + group, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, y, sy);
  _tile_stored(1, y + 16, sy);
  _tile_stored(2, y1, sy);
  _tile_stored(3, y1 + 16, sy);
}

// The runtime group count (1..4) to block_1xN's template.
void block_1(int64_t nr, const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t group, int64_t q0,
             int64_t q1, bool first, float* y, int64_t ldy) {
  switch (nr) {
    case 4:
      return block_1xN<4>(x, ldx, w, group, q0, q1, first, y, ldy);
    case 3:
      return block_1xN<3>(x, ldx, w, group, q0, q1, first, y, ldy);
    case 2:
      return block_1xN<2>(x, ldx, w, group, q0, q1, first, y, ldy);
    default:
      return block_1xN<1>(x, ldx, w, group, q0, q1, first, y, ldy);
  }
}

// Feature groups [g0, g1) (16 features each) for all `rows` rows of xb [rows, k] (rows <= 16, or a
// multiple of 16): y [rows, n] f32.
PLUMB_AMX void groups(const uint16_t* xb, int64_t rows, int64_t k, const uint16_t* w, int64_t g0, int64_t g1,
                      float* y, int64_t n) {
  configure_tiles(int(std::min<int64_t>(rows, 16)));
  const int64_t group = 16 * k;  // elements per feature group
  const int64_t steps = k / kTileK;
  if (rows <= 16) {  // decode: one pass, the weights streamed once
    for (int64_t g = g0; g < g1; g += kDecodeGroups) {
      block_1(std::min(kDecodeGroups, g1 - g), xb, k, w + g * group, group, 0, steps, true, y + g * 16, n);
    }
  } else {
    const int64_t chunk = std::min(steps, kChunkK / kTileK);  // k steps per chunk
    const int64_t row_group = std::max<int64_t>(32, kGroupBytes / (chunk * kTileK * 2) / 32 * 32);
    for (int64_t q0 = 0; q0 < steps; q0 += chunk) {
      const int64_t q1 = std::min(steps, q0 + chunk);
      for (int64_t r0 = 0; r0 < rows; r0 += row_group) {
        const int64_t r1 = std::min(rows, r0 + row_group);
        for (int64_t g = g0; g < g1; g += 2) {
          const bool pair = g + 1 < g1;
          for (int64_t r = r0; r < r1; r += 32) {
            const uint16_t* xr = xb + r * k;
            float* yr = y + r * n + g * 16;
            if (pair && r + 32 <= r1) {
              block_2x2(xr, k, w + g * group, group, q0, q1, q0 == 0, yr, n);
            } else {
              for (int64_t rr = r; rr < std::min(r + 32, r1); rr += 16) {
                block_1(pair ? 2 : 1, xb + rr * k, k, w + g * group, group, q0, q1, q0 == 0,
                        y + rr * n + g * 16, n);
              }
            }
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool supported() {
  static const bool ok = request_permission();
  return ok;
}

bool can_run(const WeightMatrix& w) {
  return w.dtype == DType::kBF16 && w.quant == QuantScheme::kNone && w.layout == WeightLayout::kPacked16 &&
         w.cols % kTileK == 0 && w.rows % 16 == 0;
}

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  if (m <= 0 || !can_run(w) || !supported()) return avx512::matmul_bf16(ctx, x, m, w, bias, y);
  const int64_t k = w.cols, n = w.rows;
  // Rows the tiles cover: m itself up to 16 (tiles configured that tall), else whole 16-row tiles.
  // The padding of the second case costs nothing next to a prefill's work; in decode it would be
  // 15 rows of x and y moving between the cores' caches on every call (on plumb-tiny's 256-wide
  // matrices that made a call ~3x slower than the work in it).
  const int64_t rows = m <= 16 ? m : (m + 15) / 16 * 16;
  // Buffers of the calling thread, grown to the largest call seen and reused: x in bf16 with zero
  // pad rows, and (when rows != m) the padded output.
  thread_local std::vector<uint16_t> xb;
  thread_local std::vector<float> yb;
  if (xb.size() < size_t(rows * k)) xb.resize(size_t(rows * k));
  avx512::round_to_bf16(x, m * k, xb.data());
  std::fill(xb.begin() + m * k, xb.begin() + rows * k, uint16_t{0});
  float* out = y;
  if (rows != m) {
    if (yb.size() < size_t(rows * n)) yb.resize(size_t(rows * n));
    out = yb.data();
  }
  const auto* wp = static_cast<const uint16_t*>(w.data);
  const uint16_t* xp = xb.data();  // the caller's buffer (a thread_local named in the lambda would be
                                   // the running thread's own)
  auto part = [&](int64_t g0, int64_t g1) {
    groups(xp, rows, k, wp, g0, g1, out, n);
    if (out == y && !bias) return;
    // This part's columns: the bias, and the copy out of the padded buffer.
    for (int64_t i = 0; i < m; ++i) {
      float* yi = y + i * n;
      const float* oi = out + i * n;
      for (int64_t j = g0 * 16; j < g1 * 16; ++j) yi[j] = oi[j] + (bias ? bias[j] : 0.0f);
    }
  };
  if (ctx.pool) {
    // Chunks of whole kernel blocks: four feature groups (decode), two (prefill).
    ctx.pool->parallel_for(n / 16, part, rows <= 16 ? kDecodeGroups : 2);
  } else {
    part(0, n / 16);
  }
}

}  // namespace plumb::engine::amx

namespace plumb::engine::detail {

void register_amx_kernels(KernelRegistry& r) {
  r.add(Op::kMatmul,
        {"amx_bf16",
         "Intel AMX tiles (TDPBF16PS) for bf16 weights packed 16 features wide with k % 32 == 0, every m: "
         "activations rounded to bf16, f32 accumulation (other weights: avx512_bf16); auto's choice in "
         "both phases where the CPU has AMX-BF16",
         &amx::supported,
         &amx::matmul,
         {5, 5},
         /*reads_packed16=*/true,
         /*bf16_activations=*/true});
}

}  // namespace plumb::engine::detail
