#!/bin/bash
# plumb serve --device cuda beside its peers on the same model, in one device call (docs/cuda.md,
# "Side by side with llama.cpp and transformers"). Run on the device host from the repository root
# with .dev carried (.dev/cuda from bench/cuda_bundle.sh; .dev/llamacpp, .dev/ib and
# .dev/llama3-tokenizer from bench/cuda_peers_pack.sh):   bash bench/cuda_peers.sh
#  1. an HF folder of the Llama-3-8B shape (models/configs/llama-3-8b) with random bf16 weights and
#     the real Llama-3 tokenizer (bench/cuda_hf_model.py);
#  2. its GGUF (bf16) through llama.cpp's convert_hf_to_gguf.py;
#  3. llama-bench -ngl 99 -p 512 -n 128 -fa 0,1 -r 3 -o json;
#  4. llama-server (-ngl 99 -fa, 8 slots) and plumb bench against it: 1,024 tokens in, 128 out
#     (--fixed-lengths), closed loop at concurrency 1 and 8, a connection per request
#     (--no-keep-alive: llama-server closes each after its stream); the server's own timings give
#     plumb's timing error (bench --json "server_timings");
#  5. plumb serve --device cuda --model on the same folder, and plumb bench the same way;
#  6. InferenceBench's naive transformers server on the same folder, IB's own runner (scenario D's,
#     which runs at concurrency 1) and plumb bench on the same request file, where torch,
#     transformers, aiohttp, numpy and requests import (said when they do not).
# Every stage runs under `timeout` within a budget for the whole script (PEERS_BUDGET_S, default
# 540 s); a stage that fails or runs out of time is recorded in stages.txt and the next one runs
# (one that needs its output says it is skipped). Outputs under $OUT (default .dev/out/peers): each
# stage's log, every figure's JSON, summary.txt at the end. Servers run in their own process group
# and are stopped at the end of their stage (and at exit).
# Settings (environment): PEERS_BUDGET_S; PEERS_WORK (scratch, default /tmp/peers: ~16 GB HF + 16 GB
# GGUF for the 8B shape); PEERS_CONFIG (default models/configs/llama-3-8b/config.json);
# PEERS_SET ("--set k=v ..." for cuda_hf_model.py: a tiny shape for a CPU dry run); PEERS_DEVICE
# (cuda | cpu: plumb serve's device; cpu is for a dry run of the script without a GPU); PLUMB (the
# plumb binary, default /tmp/cbundle/plumb from .dev/cuda/cuda_bundle.tar.xz); PEERS_REQUESTS
# ("N1 N8 NIB": measured requests at concurrency 1, 8 and against the naive server; default "8 16 6");
# PEERS_STAGES (which stages run, default "1 2 3 4 5 6"); PEERS_PACK=1 (one archive, peers.tgz, of
# every output at the end: a device call brings back few files).
set -u
R=$(pwd)
H=$(cd "$(dirname "$0")" && pwd)
DEV=$R/.dev
O=${OUT:-$R/.dev/out/peers}
W=${PEERS_WORK:-/tmp/peers}
CONFIG=${PEERS_CONFIG:-$R/models/configs/llama-3-8b/config.json}
SET=${PEERS_SET:-}
DEVICE=${PEERS_DEVICE:-cuda}
STAGES=" ${PEERS_STAGES:-1 2 3 4 5 6} "
read -r N1 N8 NIB <<< "${PEERS_REQUESTS:-8 16 6}"
BUDGET=${PEERS_BUDGET_S:-540}
T0=$(date +%s)
END=$((T0 + BUDGET))
LL=/tmp/llamacpp
HF_SCRIPT=$H/cuda_hf_model.py  # beside this script, or in the checkout's bench/ when run from .dev/cuda
[ -f "$HF_SCRIPT" ] || HF_SCRIPT=$R/bench/cuda_hf_model.py
HF=$W/hf
GGUF=$W/model.gguf
mkdir -p "$O" "$W"
: > "$O/stages.txt"
export PLUMB_MODELS_DIR=$R/models

note() { echo "$*" | tee -a "$O/stages.txt"; }
left() { echo $((END - $(date +%s))); }
# The seconds a stage may take: its cap, or what is left of the budget less a margin for the summary.
allow() {
  local t
  t=$(($(left) - 20))
  [ "$t" -gt "$1" ] && t=$1
  echo "$t"
}
# run NAME CAP CMD...: CMD under timeout, its output in $O/NAME.log, its status in stages.txt.
run() {
  local name=$1 cap=$2 t s rc
  shift 2
  t=$(allow "$cap")
  if [ "$t" -lt 10 ]; then
    note "$name: skipped (the budget of $BUDGET s is spent)"
    return 124
  fi
  s=$(date +%s)
  timeout -k 10 "$t" "$@" > "$O/$name.log" 2>&1
  rc=$?
  note "$name: rc $rc in $(($(date +%s) - s)) s (limit $t s)$([ $rc = 124 ] && echo ', timed out')"
  tail -n 4 "$O/$name.log" | cut -c1-240
  return $rc
}
want() { [[ $STAGES == *" $1 "* ]]; }

SERVERS=()
# serve NAME CMD...: starts CMD in its own process group, output in $O/NAME.log; its pid in $SPID.
serve() {
  local name=$1
  shift
  setsid "$@" > "$O/$name.log" 2>&1 < /dev/null &
  SPID=$!
  SERVERS+=("$SPID")
}
# up URL PID SECONDS: waits until URL answers 200, the server dies, or the time is over.
up() {
  local url=$1 pid=$2 t
  t=$(allow "$3")
  python3 - "$url" "$pid" "$t" <<'PY'
import os, sys, time, urllib.request
url, pid, t = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + t
while time.time() < end:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"the server exited before answering {url}")
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(1)
sys.exit(f"{url} did not answer within {t:.0f} s")
PY
}
stop() {
  local pid=$1
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null
  { wait "$pid"; } 2>/dev/null  # a server that aborts on SIGTERM is no failure of the run
}
cleanup() { for p in "${SERVERS[@]}"; do stop "$p"; done; }
trap cleanup EXIT

# bench NAME URL CONCURRENCY N [ARGS...]: plumb bench, closed loop, 1,024 in / 128 out (or ARGS),
# with the flags in CONN.
CONN=()
bench() {
  local name=$1 url=$2 c=$3 n=$4
  shift 4
  local args=("$@")
  [ ${#args[@]} -eq 0 ] && args=(--input-len 1024 --output-len 128 --fixed-lengths --num-prompts "$n")
  run "$name" 150 "$PLUMB" bench --target "$url" --tokenizer "$HF" "${args[@]}" --max-concurrency "$c" \
    --arrival closed_loop --warmup 2 --seed 21 --json "$O/$name.json" --csv "$O/$name.csv" --quiet "${CONN[@]}"
}

echo "cuda_peers.sh: budget $BUDGET s, outputs in $O, scratch in $W"
{
  date -u
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 2
  else
    echo "no nvidia-smi on this host"
  fi
  git -C "$R" log -1 --format='plumb %h %s' 2>/dev/null
} | tee "$O/device.txt"

# Unpack what was carried.
PLUMB=${PLUMB:-/tmp/cbundle/plumb}
if [ ! -x "$PLUMB" ] && [ -f "$DEV/cuda/cuda_bundle.tar.xz" ]; then tar xJf "$DEV/cuda/cuda_bundle.tar.xz" -C /tmp; fi
. "$H/cuda_nccl_env.sh"  # the host's NCCL may need a newer glibc than the bundle's
[ -x "$PLUMB" ] || note "plumb: $PLUMB is missing (carry .dev/cuda/cuda_bundle.tar.xz, or set PLUMB)"
if [ ! -x $LL/bin/llama-server ] && [ -f "$DEV/llamacpp/llamacpp.tar.xz" ]; then tar xJf "$DEV/llamacpp/llamacpp.tar.xz" -C /tmp; fi
[ -x $LL/bin/llama-server ] || note "llama.cpp: $LL/bin is missing (carry .dev/llamacpp/llamacpp.tar.xz from bench/cuda_peers_pack.sh)"

if want 1; then
  echo "== 1. HF folder with random bf16 weights and the Llama-3 tokenizer"
  if [ -f "$HF/done" ]; then
    note "hf_model: reusing $HF"
  else
    rm -rf "$HF"
    # shellcheck disable=SC2086  # PEERS_SET is a list of --set arguments
    run hf_model 180 python3 "$HF_SCRIPT" "$CONFIG" "$HF" --tokenizer "$DEV/llama3-tokenizer" $SET &&
      cp "$O/hf_model.log" "$HF/done"
  fi
fi
if [ ! -f "$HF/done" ]; then note "no HF folder: stages 2 to 6 need it"; fi

if want 2 && [ -f "$HF/done" ] && [ ! -f $LL/convert_hf_to_gguf.py ]; then
  note "gguf: skipped: $LL/convert_hf_to_gguf.py is missing (.dev/llamacpp/llamacpp.tar.xz)"
elif want 2 && [ -f "$HF/done" ]; then
  echo "== 2. GGUF (bf16) through convert_hf_to_gguf.py"
  if [ -f "$W/gguf.done" ]; then
    note "gguf: reusing $GGUF"
  else
    rm -f "$GGUF"
    # gguf-py imports sentencepiece and yaml at load; the Llama-3 BPE path uses neither (no
    # tokenizer.model, no model card), so a stand-in takes the place of a missing one.
    mkdir -p "$W/shim"
    if ! python3 -c "import sentencepiece" 2> /dev/null; then
      printf 'class SentencePieceProcessor:\n    def __init__(self, *a, **k):\n        raise ImportError("sentencepiece is not installed")\n' > "$W/shim/sentencepiece.py"
      note "gguf: sentencepiece is not installed: a stand-in module is used (the Llama-3 BPE path does not call it)"
    fi
    if ! python3 -c "import yaml" 2> /dev/null; then
      printf 'def safe_load(stream):\n    return {}\n' > "$W/shim/yaml.py"
      note "gguf: PyYAML is not installed: a stand-in module is used (no model card to read)"
    fi
    run gguf 240 env PYTHONPATH="$LL/gguf-py:$W/shim" python3 $LL/convert_hf_to_gguf.py "$HF" --outtype bf16 \
      --outfile "$GGUF" && touch "$W/gguf.done"
  fi
fi

if want 3 && [ -f "$W/gguf.done" ]; then
  echo "== 3. llama-bench"
  # Its JSON on stdout into llama_bench.json, its log (stderr) into llama_bench.log.
  # shellcheck disable=SC2016  # expanded by the inner bash
  run llama_bench 150 bash -c '"$0" -m "$1" -ngl 99 -p 512 -n 128 -fa 0,1 -r 3 -o json > "$2"' \
    $LL/bin/llama-bench "$GGUF" "$O/llama_bench.json"
fi

if want 4 && [ -f "$W/gguf.done" ] && [ -x $LL/bin/llama-server ]; then
  echo "== 4. llama-server and plumb bench"
  serve llama_server $LL/bin/llama-server -m "$GGUF" -ngl 99 -fa -c 16384 -np 8 --host 127.0.0.1 --port 8124 --metrics
  if up http://127.0.0.1:8124/health "$SPID" 180 > "$O/llama_server_up.log" 2>&1; then
    # llama-server closes the connection after each streamed response although it answers
    # keep-alive: a connection per request, or a reused one fails as reset.
    CONN=(--no-keep-alive)
    bench bench_llamacpp_c1 http://127.0.0.1:8124 1 "$N1"
    bench bench_llamacpp_c8 http://127.0.0.1:8124 8 "$N8"
    CONN=()
  else
    note "llama_server: not up: $(tail -n 1 "$O/llama_server_up.log")"
    tail -n 5 "$O/llama_server.log"
  fi
  stop "$SPID"
fi

if want 5 && [ -f "$HF/done" ] && [ -x "$PLUMB" ]; then
  echo "== 5. plumb serve --device $DEVICE and plumb bench"
  extra=()
  [ "$DEVICE" != cpu ] && extra=(--gpu-memory-utilization 0.9)
  serve plumb_serve "$PLUMB" serve --device "$DEVICE" --model "$HF" --host 127.0.0.1 --port 8125 \
    --max-num-seqs 64 --max-num-batched-tokens 2048 "${extra[@]}"
  if up http://127.0.0.1:8125/health "$SPID" 180 > "$O/plumb_serve_up.log" 2>&1; then
    bench bench_plumb_c1 http://127.0.0.1:8125 1 "$N1"
    bench bench_plumb_c8 http://127.0.0.1:8125 8 "$N8"
  else
    note "plumb_serve: not up: $(tail -n 1 "$O/plumb_serve_up.log")"
    tail -n 5 "$O/plumb_serve.log"
  fi
  stop "$SPID"
fi

if want 6 && [ -f "$HF/done" ]; then
  echo "== 6. InferenceBench's naive transformers server: IB's runner and plumb bench"
  if ! python3 -c "import torch, transformers, aiohttp, numpy, requests" > "$O/ib_imports.log" 2>&1; then
    note "ib: skipped: $(tail -n 1 "$O/ib_imports.log") (IB's server and runner need torch, transformers, aiohttp, numpy, requests)"
  elif [ ! -f "$DEV/ib/inferencebench-24cdf88-eval.tar.gz" ]; then
    note "ib: skipped: .dev/ib/inferencebench-24cdf88-eval.tar.gz is missing (bench/cuda_peers_pack.sh)"
  else
    mkdir -p "$W/ib" && tar xzf "$DEV/ib/inferencebench-24cdf88-eval.tar.gz" -C "$W/ib"
    IB=$W/ib/ib
    # One request file for both clients, in IB's format (plumb reads it as is): plumb's draw of
    # 1,024 tokens in, 128 out, with the real tokenizer.
    run ib_requests 60 "$PLUMB" bench --target null --tokenizer "$HF" --input-len 1024 --output-len 128 \
      --fixed-lengths --num-prompts "$NIB" --seed 21 --save-requests "$W/requests_plumb.jsonl" --quiet --no-vram
    python3 - "$W/requests_plumb.jsonl" "$O/requests_ib.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        r = json.loads(line)
        out.write(json.dumps({"messages": r["messages"], "max_new_tokens": r["max_tokens"],
                              "temperature": r["temperature"], "ignore_eos": True}) + "\n")
PY
    serve ib_server env -C "$IB" python3 -m src.eval.inference.servers.transformers_openai_server \
      --host 127.0.0.1 --port 8126 --model "$HF" --dtype bfloat16 --max-model-len 16384
    if up http://127.0.0.1:8126/v1/models "$SPID" 240 > "$O/ib_server_up.log" 2>&1; then
      mkdir -p "$O/ib_runner"
      run ib_runner 240 env -C "$IB" INFERENCE_BENCH_SKIP_QUALITY=1 python3 \
        src/eval/tasks/inference_scenario_d_general/evaluate.py --server-url http://127.0.0.1:8126 \
        --requests-file "$O/requests_ib.jsonl" --json-output-file "$O/ib_runner/metrics.json" \
        --server-wait-s 60 --model "$HF" --request-limit "$NIB"
      bench bench_ib_naive_c1 http://127.0.0.1:8126 1 "$NIB" --requests "$O/requests_ib.jsonl"
    else
      note "ib_server: not up: $(tail -n 1 "$O/ib_server_up.log")"
      tail -n 5 "$O/ib_server.log"
    fi
    stop "$SPID"
  fi
fi

echo "== summary"
python3 - "$O" <<'PY' | tee "$O/summary.txt"
import glob, json, os, sys
o = sys.argv[1]
print(open(f"{o}/device.txt").read().strip())
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None
lb = load(f"{o}/llama_bench.json") or []
for r in lb:
    test = f"pp{r['n_prompt']}" if r.get("n_prompt") else f"tg{r['n_gen']}"
    ms = 1e3 / r["avg_ts"] if r.get("n_gen") and r.get("avg_ts") else None
    print(f"llama-bench {test} fa {int(bool(r.get('flash_attn')))}: {r.get('avg_ts', 0):.1f} ± {r.get('stddev_ts', 0):.1f} tok/s"
          + (f" ({ms:.2f} ms/token)" if ms else ""))
if not lb:
    print("llama-bench: no figures (see stages.txt and llama_bench.log)")
def fmt(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"
for p in sorted(glob.glob(f"{o}/bench_*.json")):
    j = load(p)
    name = os.path.basename(p)[len("bench_"):-len(".json")]
    if not j:
        print(f"{name}: unreadable")
        continue
    lat, st = j["latency_ms"], j.get("server_timings") or {}
    line = (f"{name}: {j['counts']['completed']}/{j['counts']['requests']} completed, "
            f"TTFT p50 {fmt(lat['ttft']['p50'])} ms, TPOT p50 {fmt(lat['tpot']['p50'])} ms, "
            f"output {fmt(j['whole_run']['output_throughput'], 1)} tok/s, {'VALID' if j['validity']['valid'] else 'INVALID'}")
    bad = [c["name"] for c in j["validity"]["constraints"] if c["verdict"] == "fail"]
    if bad:
        line += f" ({', '.join(bad)})"
    if st.get("requests"):
        t, p_ = st.get("ttft") or {}, st.get("tpot") or {}
        line += (f"; vs {st['source']}'s own clock ({st['requests']} requests): TTFT server p50 "
                 f"{fmt(t.get('server_p50_ms'))} ms, plumb − server p50 {fmt((t.get('diff_ms') or {}).get('p50'), 3)} "
                 f"max {fmt((t.get('diff_ms') or {}).get('max'), 3)} ms")
        if p_:
            line += (f"; TPOT server p50 {fmt(p_.get('server_p50_ms'), 3)} ms, plumb − server p50 "
                     f"{fmt((p_.get('diff_ms') or {}).get('p50'), 4)} max {fmt((p_.get('diff_ms') or {}).get('max'), 4)} ms")
    else:
        line += f"; server timings: {st.get('unavailable', 'none')}"
    print(line)
ib = load(f"{o}/ib_runner/metrics.json")
if ib:
    for name, pr in (ib.get("profiles") or {}).items():
        g = lambda k: (pr.get(k) or {}).get("p50")
        ms = lambda x: "-" if x is None else f"{x * 1e3:.2f}"
        print(f"IB runner ({name}) on the naive server: {pr.get('success_count')}/{pr.get('request_count')} ok, "
              f"TTFT p50 {ms(g('ttft'))} ms, TPOT p50 {ms(g('tpot'))} ms, "
              f"{pr.get('generation_throughput_tokens_per_s')} gen tok/s (IB's definition)")
print("stages:")
print(open(f"{o}/stages.txt").read().rstrip())
PY
echo "cuda_peers.sh: done in $(($(date +%s) - T0)) s; outputs in $O"
# A device call brings back only a few files: PEERS_PACK=1 leaves one archive of every output.
if [ "${PEERS_PACK:-0}" = 1 ]; then
  tar czf /tmp/peers.tgz -C "$O" . && find "$O" -mindepth 1 -delete && mv /tmp/peers.tgz "$O/" &&
    echo "outputs packed into $O/peers.tgz"
fi
