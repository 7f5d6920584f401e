#!/bin/bash
# Tensor parallelism's tests and figures (docs/cuda.md "Tensor parallelism"; issue 29), in one call
# on a device host with several GPUs (a kind nvidia-h100-x2/x4/x8 or h200-x2/x4/x8), from the
# repository root with the folder bench/cuda_bundle.sh filled (default .dev/cuda) carried; the bundle
# must hold plumb, cuda_runner_test, cuda_runner_bench and cuda_allreduce_bench:
#   bash bench/cuda_bundle.sh build/ci/plumb build/ci/tests/engine/cuda/cuda_runner_test \
#     build/ci/bench/cuda_runner_bench build/ci/bench/cuda_allreduce_bench
#  1. the tensor-parallel GPU tests (2 and 4 cards against one, greedy tokens identical; each skips
#     on a machine with fewer cards) and `plumb serve --tensor-parallel-size N` answering a request;
#  2. card 0's copy bandwidth (cuda_ceilings.py);
#  3. NCCL all-reduce at N = 2, 4, 8 (as many as the machine has): the all-reduces of one batch-1
#     decode step of each shape below, and the bus bandwidth of a 256 MiB all-reduce;
#  4. batch-1 (and 8) decode of Llama-3-70B's shape (dummy bf16) at N = 4 and 8, and Llama-3-8B's at
#     N = 1, 2, 4 (cuda_runner_bench --tp N);
#  5. the ratios: TPOT over its roofline = card 0's weight bytes (it holds the largest share) over
#     the copy bandwidth, plus the step's all-reduce time measured in 3.
# Usage: bash .dev/cuda/cuda_tp_runs.sh [BUILD_SOURCE_DIR]. Outputs under $OUT. NCCL comes from the
# device's /usr/local/cuda/lib64 (the bundle does not carry it).
set -u
R=$(pwd)
H=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-$R/.dev/out}
mkdir -p "$O"
[ -x /tmp/cbundle/plumb ] || tar xJf "$H/cuda_bundle.tar.xz" -C /tmp
. "$H/cuda_nccl_env.sh"  # the host's NCCL may need a newer glibc than the bundle's
B=/tmp/cbundle
if [ -n "${1:-}" ] && [ ! -e "$1" ]; then mkdir -p "$(dirname "$1")" && ln -s "$R" "$1"; fi
export PLUMB_MODELS_DIR=$R/models NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$O/devices.txt"
nvidia-smi topo -m > "$O/topology.txt" 2>&1
N=$(nvidia-smi -L | wc -l)

echo "== 1. tensor-parallel tests ($N cards)"
"$B/cuda_runner_test" --gtest_color=no --gtest_filter='CudaRunnerTensorParallel.*' 2>&1 | tee "$O/tp_tests.txt" |
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED|measured) |Failure" | cut -c1-240
# plumb-tiny (2 KV heads) on 2 cards; Qwen3-0.6B's shape (8 KV heads, dummy weights) on 4.
for n in 2 4; do
  [ "$n" -le "$N" ] || continue
  port=$((18300 + n))
  model=(); [ $n = 4 ] && model=(--model-config qwen3-0.6b --load-format dummy)
  "$B/plumb" serve --device cuda:0 --tensor-parallel-size $n "${model[@]}" --port $port > "$O/serve_tp$n.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 1; done
  name=$(curl -s "http://127.0.0.1:$port/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
  curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$name\", \"prompt\": \"The capital of France is\", \"max_tokens\": 16, \"temperature\": 0}" \
    > "$O/serve_tp$n.json"
  echo "serve --tensor-parallel-size $n: $(head -c 300 "$O/serve_tp$n.json")"
  kill $pid; wait $pid 2> /dev/null
done

echo "== 2. ceilings (card 0)"
python3 "$H/cuda_ceilings.py" | tee "$O/ceilings.jsonl"

echo "== 3. NCCL all-reduce"
for n in 2 4 8; do
  [ "$n" -le "$N" ] || continue
  "$B/cuda_allreduce_bench" $n --hidden 8192 --layers 80 | sed "s/{/{\"shape\":\"llama-3-70b\",/" | tee -a "$O/allreduce.jsonl"
  "$B/cuda_allreduce_bench" $n --hidden 4096 --layers 32 --bytes 0 2> /dev/null | grep step |
    sed "s/{/{\"shape\":\"llama-3-8b\",/" | tee -a "$O/allreduce.jsonl"
done

echo "== 4. decode, dummy bf16 weights"
for n in 4 8; do
  [ "$n" -le "$N" ] || continue
  timeout 560 "$B/cuda_runner_bench" models/configs/llama-3-70b/config.json --tp $n --prompt 1024 --steps 32 \
    --batches 1,8 --prefill 0 --short 0 | sed "s/{/{\"shape\":\"llama-3-70b\",/" | tee -a "$O/tp_bench.jsonl"
done
for n in 1 2 4; do
  [ "$n" -le "$N" ] || continue
  "$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --tp $n --prompt 1024 --steps 32 --batches 1,8 \
    --prefill 0 --short 0 | sed "s/{/{\"shape\":\"llama-3-8b\",/" | tee -a "$O/tp_bench.jsonl"
done

echo "== 5. ratios"
python3 - "$O" <<'PY' | tee "$O/tp_summary.txt"
import json, sys
o = sys.argv[1]
rows = lambda f: [json.loads(l) for l in open(f"{o}/{f}") if l.startswith("{")]
bw = [r for r in rows("ceilings.jsonl") if r["measure"] == "copy"][0]["bytes_per_s"]
bench, ar = rows("tp_bench.jsonl"), rows("allreduce.jsonl")
setup = {(r["shape"], r["tp"]): r for r in bench if r["measure"] == "setup"}
step_ar = {(r["shape"], r["cards"]): r["median_ms"] for r in ar if r["measure"] == "allreduce_step"}
for r in ar:
    if r["measure"] == "allreduce_busbw":
        print(f"all-reduce {r['cards']} cards, {r['bytes'] >> 20} MiB: bus bandwidth {r['busbw_gbs']:.0f} GB/s")
print(f"card 0 copy bandwidth {bw / 1e12:.3f} TB/s")
for r in bench:
    if r["measure"] != "decode" or r["batch"] != 1:
        continue
    s = setup[(r["shape"], r["tp"])]
    weights = s["weight_bytes_card0"] / bw * 1e3
    comm = step_ar.get((r["shape"], r["tp"]), 0.0)
    roof = weights + comm
    print(f"{r['shape']} tp {r['tp']} batch 1 ctx {r['context']}: TPOT {r['greedy_median_ms']:.3f} ms (greedy), "
          f"{r['median_ms']:.3f} ms (logits to the host); roofline {roof:.3f} ms = weights {weights:.3f} + "
          f"all-reduce {comm:.3f}; ratio {r['greedy_median_ms'] / roof:.3f}")
PY
