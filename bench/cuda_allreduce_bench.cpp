// NCCL all-reduce on the cards of one host, the two measures beside a tensor-parallel TPOT
// (bench/cuda_tp_runs.sh, docs/cuda.md "Tensor parallelism"):
//   step    the all-reduces of one decode step of the tensor-parallel runner: 2 per layer, each of
//           tokens × hidden float32 values in place (as the runner sums the residual stream), issued
//           back to back on each card's stream; median wall time of `reps` steps (host clock, all
//           streams synchronized), after 5 warm-up steps;
//   busbw   the bus bandwidth of one large all-reduce (`--bytes`, float32): algbw = bytes / time,
//           busbw = algbw · 2(N − 1)/N (NCCL's definition: what each link carries); median of `reps`.
//
//   cuda_allreduce_bench N [--hidden 8192] [--layers 80] [--tokens 1] [--reps 20] [--bytes 268435456]
//
// One JSON object per measure on stdout. Cards 0..N-1; one thread drives them all (ncclGroupStart/End
// around each collective). NCCL_NVLS_ENABLE=0 is set before NCCL starts.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CHECK_CUDA(x)                                               \
  do {                                                              \
    const cudaError_t e_ = (x);                                     \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)
#define CHECK_NCCL(x)                                               \
  do {                                                              \
    const ncclResult_t r_ = (x);                                    \
    if (r_ != ncclSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, ncclGetErrorString(r_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: cuda_allreduce_bench N [--hidden 8192] [--layers 80] [--tokens 1] [--reps 20] "
                 "[--bytes 268435456]\n");
    return 2;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const int n = std::atoi(argv[1]);
  long long hidden = 8192, layers = 80, tokens = 1, reps = 20, bytes = 256LL << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (k == "--hidden") hidden = v;
    if (k == "--layers") layers = v;
    if (k == "--tokens") tokens = v;
    if (k == "--reps") reps = v;
    if (k == "--bytes") bytes = v;
  }
  int have = 0;
  CHECK_CUDA(cudaGetDeviceCount(&have));
  if (n < 2 || n > have) {
    std::fprintf(stderr, "cuda_allreduce_bench: N must be 2..%d (the cards this machine has), not %d\n", have,
                 n);
    return 2;
  }
  std::vector<int> devs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) devs[size_t(d)] = d;
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  CHECK_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
  const size_t step_elems = size_t(tokens * hidden), big_elems = size_t(bytes) / 4;
  std::vector<float*> buf(static_cast<size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaMalloc(&buf[size_t(d)], std::max(step_elems, big_elems) * 4));
    CHECK_CUDA(cudaMemset(buf[size_t(d)], 0, std::max(step_elems, big_elems) * 4));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[size_t(d)], cudaStreamNonBlocking));
  }
  auto all_reduce = [&](size_t elems) {
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < n; ++d) {
      CHECK_NCCL(ncclAllReduce(buf[size_t(d)], buf[size_t(d)], elems, ncclFloat32, ncclSum, comms[size_t(d)],
                               streams[size_t(d)]));
    }
    CHECK_NCCL(ncclGroupEnd());
  };
  auto sync = [&] {
    for (int d = 0; d < n; ++d) {
      CHECK_CUDA(cudaSetDevice(d));
      CHECK_CUDA(cudaStreamSynchronize(streams[size_t(d)]));
    }
  };
  std::vector<double> step_ms;
  for (long long r = 0; r < reps + 5; ++r) {
    const double a = now_ms();
    for (long long l = 0; l < 2 * layers; ++l) all_reduce(step_elems);
    sync();
    if (r >= 5) step_ms.push_back(now_ms() - a);
  }
  std::printf(
      "{\"measure\":\"allreduce_step\",\"cards\":%d,\"hidden\":%lld,\"layers\":%lld,\"tokens\":%lld,"
      "\"messages\":%lld,\"message_bytes\":%lld,\"median_ms\":%.4f,\"min_ms\":%.4f}\n",
      n, hidden, layers, tokens, 2 * layers, (long long)(step_elems * 4), median(step_ms),
      *std::min_element(step_ms.begin(), step_ms.end()));
  std::fflush(stdout);
  std::vector<double> big_ms;
  for (long long r = 0; r < reps + 2; ++r) {
    const double a = now_ms();
    all_reduce(big_elems);
    sync();
    if (r >= 2) big_ms.push_back(now_ms() - a);
  }
  const double t = median(big_ms) / 1e3, algbw = double(big_elems * 4) / t / 1e9;
  std::printf(
      "{\"measure\":\"allreduce_busbw\",\"cards\":%d,\"bytes\":%lld,\"median_ms\":%.3f,\"algbw_gbs\":%.1f,"
      "\"busbw_gbs\":%.1f}\n",
      n, (long long)(big_elems * 4), t * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
  for (int d = 0; d < n; ++d) {
    ncclCommDestroy(comms[size_t(d)]);
    CHECK_CUDA(cudaSetDevice(d));
    cudaFree(buf[size_t(d)]);
    cudaStreamDestroy(streams[size_t(d)]);
  }
  return 0;
}
