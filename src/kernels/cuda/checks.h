// The host side of screening a CUDA candidate: the references, the error bound, the shape range,
// guard regions, the roofline floor and the timing summary. Pure functions over host arrays, so
// they are tested without a GPU; screen.h runs them on what the device returned.
//
// The reference is plumb's host reference of each op in float32, in the engine kernels' order of
// operations (engine/cuda/rmsnorm.cu, swiglu.cu) and with their bf16 rounding (round to nearest
// even), accumulating the sum of squares in double.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {

enum class ScreenVerdict {
  kPass,
  kWrongOutput,       // an output beyond the bound during the correctness draws
  kWrongAfterTiming,  // correct before, wrong on the last timed rep (a table or a cache)
  kMutatedInput,      // an input buffer changed
  kGuardOverwritten,  // a write outside an output buffer
  kLaunchError,       // the launch or the kernel failed (illegal address, bad configuration)
  kMeasurementError,  // the roofline floor: faster than the card can move the bytes
  kAbiRefused,        // the cubin's PLUMB_LAUNCH is not this plumb's ABI or not this op
  kCrashed,           // the child died
  kTimedOut,          // the child ran past the limit (a hanging kernel)
  kNoDevice,          // no CUDA device visible: nothing was screened
  kSanitizerError,    // right outputs, but compute-sanitizer reported an error (sanitize.h) or could not run
};
// "pass" | "wrong_output" | "wrong_output_after_timing" | "mutated_input" | "guard_overwritten" |
// "launch_error" | "measurement_error" | "abi_refused" | "crashed" | "timed_out" | "no_device" |
// "sanitizer_error".
std::string_view verdict_name(ScreenVerdict v);

// float -> bf16 bits, round to nearest even, NaN kept quiet (as __float2bfloat16 and
// plumb_bf16_bits); and back.
uint16_t bf16_bits(float f);
float bf16_value(uint16_t bits);

// One shape of an op: rmsnorm_residual rows x d (x_stride >= d, y_stride >= d); swiglu T x ff
// (gu_stride >= 2 ff, out_stride >= ff).
struct Shape {
  int64_t rows = 1;  // rows (rmsnorm_residual) or T (swiglu)
  int64_t cols = 1;  // d or ff
  int64_t in_stride = 0;
  int64_t out_stride = 0;
  std::string to_string() const;
};

// The shapes screened for correctness, edge shapes included: rows 1, 2, 3, rows_max / 2 + 1 (odd)
// and rows_max; columns `cols` and, when `cols` is even, cols - 1 (an odd width: no vector path,
// a last partial vector); one padded stride. InvalidArgument unless rows_max >= 1 and cols >= 2.
Result<std::vector<Shape>> shape_range(CudaOp op, int64_t rows_max, int64_t cols);

// The inputs and outputs of one call, host side, with strides as in Shape.
struct HostCase {
  Shape shape;
  std::vector<float> in;   // rmsnorm_residual: x; swiglu: gu
  std::vector<float> in2;  // rmsnorm_residual: residual; swiglu: unused
  std::vector<float> w;    // rmsnorm_residual: weight [d]; swiglu: unused
  float eps = 1e-5f;
  std::vector<float> ref_h;     // rmsnorm_residual: x + residual (the f32 output)
  std::vector<uint16_t> ref_y;  // the bf16 output
};

// Fresh random inputs for `shape`. magnitude 0: values of order 1; 1: outputs of order 1e-4 (the
// draw that catches a candidate returning zeros under a loose absolute tolerance); 2: inputs of
// order 1e3. Padding between rows is filled with NaN (a read of it shows in the output).
HostCase random_case(CudaOp op, const Shape& shape, uint64_t seed, int magnitude);
// Fills ref_h and ref_y.
void reference(CudaOp op, HostCase* c);

// The error bound, scaled by the outputs' magnitude: |got - ref| <= rtol |ref| + atol_frac · rms(ref)
// per element, where rms(ref) is over the whole output. bf16 outputs: rtol 2^-7 (one bf16 ulp; the
// candidate's float math may round the other way), atol_frac 2^-8; float32 outputs: rtol 1e-5,
// atol_frac 1e-6. A NaN or an infinity where the reference is finite is an error.
struct Bound {
  double rtol = 0;
  double atol_frac = 0;
};
inline constexpr Bound kBf16Bound{1.0 / 128, 1.0 / 256};
inline constexpr Bound kF32Bound{1e-5, 1e-6};

struct Mismatch {
  bool ok = true;
  int64_t index = -1;  // the first element out of bound
  double got = 0, want = 0;
  double max_rel_err = 0;  // max |got - ref| / (rtol |ref| + atol_frac rms) over elements (<= 1: ok)
  std::string message;     // empty when ok
};
// Compares the `rows` x `cols` elements at stride `stride` (elements between rows are ignored).
Mismatch compare_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref, int64_t rows,
                      int64_t cols, int64_t stride, Bound b = kBf16Bound);
Mismatch compare_f32(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows, int64_t cols,
                     int64_t stride, Bound b = kF32Bound);

// What one call left, read back from wherever it ran: the outputs, the inputs, and the guard
// regions' state ("" when intact, else where the damage is).
struct Readback {
  std::vector<float> h;     // rmsnorm_residual h_out
  std::vector<uint16_t> y;  // the bf16 output
  std::vector<float> in, in2;
  std::string guard_damage;
};

// The verdict of one call: inputs unchanged (else kMutatedInput), guards intact (kGuardOverwritten),
// then h_out (float32 bound) and y (bf16 bound) against the reference (kWrongOutput). `reason` says
// what and where.
ScreenVerdict judge(CudaOp op, const HostCase& c, const Readback& r, std::string* reason);

// Runs one call of the candidate on `c` (the shape_index-th shape of the range) into outputs
// poisoned with NaN and reads it back; an error Status is a launch error.
using CallFn = std::function<Result<Readback>(const HostCase& c, size_t shape_index)>;

struct Verdict {
  ScreenVerdict verdict = ScreenVerdict::kPass;
  std::string reason;
  int64_t calls = 0;
};
// The correctness part of screening: per shape, `draws` fresh random draws (magnitudes 0, 1, 2
// cycled; seeds from `seed` on), then the first draw repeated (a candidate that recognizes an input
// it has seen and skips the work leaves the poison behind). Stops at the first failing call.
Verdict run_correctness(CudaOp op, const std::vector<Shape>& shapes, int draws, uint64_t seed,
                        const CallFn& call);

// Guard regions: bytes before and after every device buffer, filled with this pattern (a float NaN,
// 0x7fc0dead, so that an out-of-bounds read poisons the output; an out-of-bounds write changes it).
inline constexpr uint32_t kGuardWord = 0x7fc0deadu;
// The first offset in `guard` (bytes) that does not hold the pattern, or -1. The pattern is written
// as whole words from an aligned base, so a region that starts `phase` bytes into a word (the guard
// after a buffer whose size is not a multiple of 4) expects byte (phase + i) % 4 of kGuardWord at i.
int64_t guard_damage(const std::vector<uint8_t>& guard, size_t phase = 0);

// Bytes the op must read from device memory for one call: its inputs, which the L2 flush before each
// timed rep leaves in DRAM. Outputs are not counted: up to the L2's size they can be written into
// L2 and reach DRAM after the closing event, so counting them would make an honest kernel look
// faster than the card.
int64_t bytes_read(CudaOp op, const Shape& s);

// The roofline floor: a time in which `bytes` (bytes_read) would have been read faster than the
// measured copy bandwidth (read + write traffic of a device-to-device copy, times `slack`) is a
// measurement error, not a win. Returns the message, empty when plausible.
std::string roofline_violation(int64_t bytes, double seconds, double copy_bytes_per_s, double slack = 1.05);

// Median of the timed reps with a 95% bootstrap percentile interval (2000 resamples, fixed seed).
struct TimeSummary {
  double median_us = 0, lo_us = 0, hi_us = 0;
  int64_t reps = 0;
};
Result<TimeSummary> summarize_times(const std::vector<double>& us);

}  // namespace plumb::kernels::cuda
