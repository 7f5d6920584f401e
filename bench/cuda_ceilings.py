"""The two ceilings of a CUDA device, measured the way bench/cuda_runs.sh compares against them.

copy: device-to-device copy of a 4 GiB bf16 buffer, bytes read + written per second (median of 20
after 5 warm-ups, CUDA events). gemm: torch.matmul of two random 8192x8192 bf16 matrices, TFLOP/s
(median of 20 after 5 warm-ups). Prints one JSON object per ceiling.
"""
import json
import statistics

import torch


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def main():
    dev = torch.cuda.get_device_properties(0)
    n = (4 << 30) // 2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    print(json.dumps({"measure": "copy", "device": dev.name, "bytes": 2 * n * 2, "median_s": t,
                      "bytes_per_s": 2 * n * 2 / t}))
    del src, dst
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: torch.matmul(a, b))
    print(json.dumps({"measure": "gemm", "device": dev.name, "m": m, "median_s": t, "flops_per_s": 2 * m**3 / t}))


if __name__ == "__main__":
    main()
