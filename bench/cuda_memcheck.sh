#!/bin/bash
# compute-sanitizer over the GPU tests (tests/engine/cuda), on the device host after
# bench/cuda_runs.sh or with the bundle unpacked to /tmp/cbundle: memcheck over every test but the
# refusal of a 1.2 TB model (it allocates nothing), then racecheck (shared-memory hazards) over the
# tests of the small dummy models. Logs under $OUT; prints each tool's ERROR SUMMARY and exits
# non-zero if either found an error.
set -u
H=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-$(pwd)/.dev/out}
mkdir -p "$O"
[ -x /tmp/cbundle/cuda_runner_test ] || tar xJf "$H/cuda_bundle.tar.xz" -C /tmp
. "$H/cuda_nccl_env.sh"  # the host's NCCL may need a newer glibc than the bundle's
T=/tmp/cbundle/cuda_runner_test
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
rc=0
timeout 420 "$CS" --tool memcheck --error-exitcode 3 "$T" --gtest_color=no \
  --gtest_filter='-*ModelThatDoesNotFit*' > "$O/memcheck.txt" 2>&1 || rc=1
echo "memcheck: $(grep -E '^\[  (PASSED|FAILED) ' "$O/memcheck.txt" | tr '\n' ' ')$(grep 'ERROR SUMMARY' "$O/memcheck.txt" | tail -1)"
timeout 240 "$CS" --tool racecheck --error-exitcode 3 "$T" --gtest_color=no \
  --gtest_filter='*Qwen2*:*HeadDim256*:*CudaGraphs*' > "$O/racecheck.txt" 2>&1 || rc=1
echo "racecheck: $(grep -E '^\[  (PASSED|FAILED) ' "$O/racecheck.txt" | tr '\n' ' ')$(grep 'ERROR SUMMARY' "$O/racecheck.txt" | tail -1)"
exit $rc
