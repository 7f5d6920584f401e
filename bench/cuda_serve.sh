#!/bin/bash
# `plumb serve --device cuda` on the Llama-3-8B shape (dummy bf16 weights) measured end to end by
# `plumb bench`: closed loop at concurrency 1, 8 and 64, 1,024-token prompts, 128 output tokens.
# Runs on the device host from the repository root with the folder bench/cuda_bundle.sh filled
# (default .dev/cuda) carried: `bash .dev/cuda/cuda_serve.sh`. The KV cache is sized by
# --gpu-memory-utilization 0.9; CUDA graphs on (the default). JSON results and the server log under
# $OUT. Limit: the dummy model's vocabulary (128,256 ids)
# borrows the shipped tokenizer (1,207 ids), so most generated ids have no text; the client's
# re-count and its chunk timings (TPOT, ITL) then disagree with the server's usage, and bench marks
# the run invalid (token_count_disagreement). Request counts, failures and usage-based token
# throughput stand; latency per token needs a model whose tokenizer covers its vocabulary.
set -u
R=$(pwd)
H=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-$R/.dev/out}
mkdir -p "$O"
[ -x /tmp/cbundle/plumb ] || tar xJf "$H/cuda_bundle.tar.xz" -C /tmp
. "$H/cuda_nccl_env.sh"  # the host's NCCL may need a newer glibc than the bundle's
P=/tmp/cbundle/plumb
export PLUMB_MODELS_DIR=$R/models
PORT=8123
"$P" serve --device cuda --model-config llama-3-8b --load-format dummy --port $PORT --max-num-seqs 64 \
  --max-num-batched-tokens 2048 --gpu-memory-utilization 0.9 > "$O/serve.log" 2>&1 &
SP=$!
up=0
for _ in $(seq 1 180); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" 2>/dev/null; then up=1; break; fi
  sleep 1
done
[ $up = 1 ] || { echo "server did not come up"; tail -20 "$O/serve.log"; kill $SP; exit 1; }
grep -m1 "listening" "$O/serve.log"
grep -m1 "kv_cache_sized" "$O/serve.log"
for c in 1 8 64; do
  n=$((c * 4)); [ $n -lt 16 ] && n=16
  echo "== concurrency $c, $n requests"
  "$P" bench --target http://127.0.0.1:$PORT --tokenizer models/plumb-tiny --input-len 1024 --output-len 128 \
    --num-prompts $n --max-concurrency $c --arrival closed_loop --json "$O/serve_c$c.json" 2>&1 | tail -22
done
kill $SP
wait $SP
