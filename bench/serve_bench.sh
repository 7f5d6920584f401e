#!/usr/bin/env bash
# Speed and accuracy evidence for plumb serve and plumb bench (BENCHMARKS.md, "Client ceiling",
# "Timing error" and "Serving"): each experiment starts real `plumb serve` processes on free ports, drives them with
# `plumb bench --json`, and prints medians and same-run ratios. Arms alternate (A B A B ...) so that
# drift and other load on the machine hit both alike.
#
# Usage: bench/serve_bench.sh PLUMB_BINARY EXPERIMENT [REPS]
#   batching  output tok/s at 32 concurrent streams (32 requests, 32 in / 8 out tokens): default
#             preset vs naive preset vs default with
#             --max-num-seqs 1 (batching alone), shipped model (or MODEL_ARGS="--model-config X
#             --load-format dummy")
#   prefix    median TTFT on a shared-400-token-prefix workload, prefix caching on vs off
#   accuracy  synthetic server (ttft 50 ms, itl 10 ms): measured TTFT / ITL vs the configured truth
#             at ~100 concurrent streams (constant arrivals at 400 req/s)
#   pacing    synthetic server: achieved arrival rate vs target and send lag, up to 1,000 req/s
#   capacity  synthetic server: N concurrent streams all sent at t = 0 (a burst), events/s, send
#             lag, client and server CPU per event (STREAMS lists the N, default 500 1000 2000)
#   capacity-ramp  synthetic server: streams arrive at a constant rate so that N are in flight in
#             the steady state (200 tokens at 20 ms = 4 s each, rate N/4 per second for 8 s);
#             events/s counted inside the window where all N are in flight, send lag, client CPU
#             per event. STREAMS lists the N (default 1000 2000 3000).
#   contention  synthetic server (ttft 5 ms, itl 2 ms) with one busy loop per core running beside
#             it: burst of 200 requests (64 in / 32 out) at concurrency 4, send lag p50 / p99 / max per
#             run: does the client keep its schedule when the machine's cores are all busy?
# SERVER_ARGS adds flags to plumb serve in the capacity experiments (e.g. --io-threads 4); BENCH_ARGS
# adds flags to plumb bench in `contention` (e.g. --no-realtime-pacing).
# Needs python3 (reads the JSON and CSV outputs). REPS defaults to 3. SERVER_CPUS and CLIENT_CPUS
# (taskset CPU lists, e.g. SERVER_CPUS=0 CLIENT_CPUS=1) pin the server and the client apart.
set -euo pipefail
PLUMB=${1:?usage: bench/serve_bench.sh PLUMB_BINARY EXPERIMENT [REPS]}
EXP=${2:?experiment: batching | prefix | accuracy | pacing | capacity | capacity-ramp | contention}
REPS=${3:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL_ARGS=${MODEL_ARGS:---model $ROOT/models/plumb-tiny}
TOKENIZER=${TOKENIZER:-$ROOT/models/plumb-tiny}
SRV_PIN=(${SERVER_CPUS:+taskset -c $SERVER_CPUS})
CLI_PIN=(${CLIENT_CPUS:+taskset -c $CLIENT_CPUS})
WORK=$(mktemp -d /tmp/plumb_serve_bench.XXXXXX)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# start_server ARGS...: sets SERVER_PID and PORT.
SERVE_N=0
start_server() {
  SERVE_N=$((SERVE_N + 1))
  local log="$WORK/serve.$SERVE_N.log"  # a fresh file: never read an earlier server's port
  "${SRV_PIN[@]}" "$PLUMB" --log-level warn serve --port 0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || true)
    [ -n "$PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "plumb serve did not start" >&2
  exit 1
}
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
# bench OUT.json ARGS...: plumb bench against the running server (exit code 1 = INVALID run is kept).
bench() {
  local out=$1
  shift
  "${CLI_PIN[@]}" "$PLUMB" bench --target "http://127.0.0.1:$PORT" --api completions --quiet --json "$out" "$@" \
    >"$out.txt" 2>&1 || true
  [ -s "$out" ] || { cat "$out.txt"; exit 1; }
}
# field FILE.json PYTHON-EXPR: evaluates the expression with d = the JSON.
# The running server's CPU seconds so far (utime + stime of /proc/PID/stat).
server_cpu_s() { awk -v tck="$(getconf CLK_TCK)" '{print ($14 + $15) / tck}' "/proc/$SERVER_PID/stat"; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
median() { python3 -c "import statistics,sys; print(round(statistics.median(float(x) for x in sys.argv[1:]), 4))" "$@"; }

echo "# $EXP, $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), server CPUs ${SERVER_CPUS:-any}, client CPUs ${CLIENT_CPUS:-any}"
case $EXP in
batching)
  declare -A tps
  for r in $(seq 1 "$REPS"); do
    for arm in naive default seqs1; do
      case $arm in
      naive) start_server $MODEL_ARGS --preset naive ;;
      default) start_server $MODEL_ARGS ;;
      seqs1) start_server $MODEL_ARGS --max-num-seqs 1 ;;
      esac
      bench "$WORK/b.json" --tokenizer "$TOKENIZER" --input-len 32 --output-len 8 --fixed-lengths \
        --num-prompts 32 --max-concurrency 32 --warmup 1
      stop_server
      v=$(field "$WORK/b.json" "d['whole_run']['output_throughput']")
      tps[$arm]="${tps[$arm]:-} $v"
      echo "rep $r $arm: output $v tok/s, failures $(field "$WORK/b.json" "{k: v for k, v in d['failures'].items() if v}")"
    done
  done
  n=$(median ${tps[naive]}); d=$(median ${tps[default]}); s=$(median ${tps[seqs1]})
  echo "median output tok/s: naive $n, default $d, default with --max-num-seqs 1 $s"
  echo "ratio default/naive $(python3 -c "print(round($d/$n, 2))"), default/seqs1 $(python3 -c "print(round($d/$s, 2))")"
  ;;
prefix)
  declare -A ttft
  for r in $(seq 1 "$REPS"); do
    for arm in on off; do
      start_server $MODEL_ARGS --enable-prefix-caching $([ $arm = on ] && echo true || echo false)
      bench "$WORK/p.json" --tokenizer "$TOKENIZER" --prefix-len 400 --num-prefixes 1 --input-len 32 \
        --output-len 4 --fixed-lengths --num-prompts 40 --max-concurrency 1 --warmup 1
      stop_server
      v=$(field "$WORK/p.json" "d['latency_ms']['ttft']['p50']")
      ttft[$arm]="${ttft[$arm]:-} $v"
      echo "rep $r caching $arm: median TTFT $v ms"
    done
  done
  on=$(median ${ttft[on]}); off=$(median ${ttft[off]})
  echo "median TTFT: caching on $on ms, off $off ms; off/on $(python3 -c "print(round($off/$on, 2))")"
  ;;
accuracy)
  start_server --engine synthetic --ttft-ms 50 --itl-ms 10
  for r in $(seq 1 "$REPS"); do
    bench "$WORK/a.json" --input-len 32 --output-len 20 --fixed-lengths --num-prompts 2000 \
      --arrival constant --request-rate 400 --max-concurrency 150 --warmup 5
    field "$WORK/a.json" "'rep $r: peak in flight %d; TTFT p50 %.3f p99 %.3f (truth 50: error %+.3f / %+.3f ms); ITL p50 %.3f p99 %.3f (truth 10: error %+.3f / %+.3f ms); send lag p99 %.3f ms' % (d['counts']['max_in_flight'], d['latency_ms']['ttft']['p50'], d['latency_ms']['ttft']['p99'], d['latency_ms']['ttft']['p50']-50, d['latency_ms']['ttft']['p99']-50, d['latency_ms']['itl']['p50'], d['latency_ms']['itl']['p99'], d['latency_ms']['itl']['p50']-10, d['latency_ms']['itl']['p99']-10, d['latency_ms']['send_lag']['p99'])"
  done
  stop_server
  ;;
pacing)
  start_server --engine synthetic --ttft-ms 1 --itl-ms 1
  for rate in 100 500 1000; do
    n=$((rate * 5))
    bench "$WORK/r.json" --input-len 8 --output-len 2 --fixed-lengths --num-prompts $n --arrival constant \
      --request-rate $rate --warmup 5 --csv "$WORK/r.csv"
    python3 - "$WORK/r.csv" "$WORK/r.json" $rate <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
rate = float(sys.argv[3])
col = next(c for c in rows[0] if c.startswith('sent'))
sent = sorted(float(r[col]) for r in rows if r[col])
achieved = (len(sent) - 1) / ((sent[-1] - sent[0]) / 1000.0)
print(f"target {rate:.0f} req/s: achieved {achieved:.2f} req/s (ratio {achieved / rate:.4f}), "
      f"send lag p50 {d['latency_ms']['send_lag']['p50']:.3f} p99 {d['latency_ms']['send_lag']['p99']:.3f} ms, "
      f"{d['counts']['failed']} failed")
EOF
  done
  stop_server
  ;;
capacity)
  start_server --engine synthetic --ttft-ms 20 --itl-ms 20 ${SERVER_ARGS:-}
  for streams in ${STREAMS:-500 1000 2000}; do
    srv0=$(server_cpu_s)
    "${CLI_PIN[@]}" /usr/bin/time -f "%U %S" -o "$WORK/time" \
      "$PLUMB" bench --target "http://127.0.0.1:$PORT" --api completions --quiet --json "$WORK/c.json" \
      --input-len 8 --output-len 200 --fixed-lengths --num-prompts $streams --max-concurrency $streams \
      --warmup 1 >"$WORK/c.txt" 2>&1 || true
    srv=$(python3 -c "print($(server_cpu_s) - $srv0)")
    cpu=$(tail -1 "$WORK/time" | awk '{print $1 + $2}')
    field "$WORK/c.json" "'%d concurrent streams: peak in flight %d, %d events in %.2f s = %.0f events/s; send lag p99 %.3f ms; ITL p50 %.2f p99 %.2f ms (truth 20); client CPU %.2f s = %.2f us/event; server CPU %.2f s = %.2f us/event; %d failed' % ($streams, d['counts']['max_in_flight'], d['latency_ms']['itl']['count'] + d['counts']['completed'], d['whole_run']['duration_s'], (d['latency_ms']['itl']['count'] + d['counts']['completed']) / d['whole_run']['duration_s'], d['latency_ms']['send_lag']['p99'], d['latency_ms']['itl']['p50'], d['latency_ms']['itl']['p99'], $cpu, $cpu * 1e6 / (d['latency_ms']['itl']['count'] + d['counts']['completed']), $srv, $srv * 1e6 / (d['latency_ms']['itl']['count'] + d['counts']['completed']), d['counts']['failed'])"
  done
  stop_server
  ;;
capacity-ramp)
  start_server --engine synthetic --ttft-ms 20 --itl-ms 20 ${SERVER_ARGS:-}
  for streams in ${STREAMS:-1000 2000 3000}; do
    rate=$((streams / 4))
    n=$((rate * 8))
    "${CLI_PIN[@]}" /usr/bin/time -f "%U %S" -o "$WORK/time" \
      "$PLUMB" bench --target "http://127.0.0.1:$PORT" --api completions --quiet --json "$WORK/c.json" \
      --csv "$WORK/c.csv" --input-len 8 --output-len 200 --fixed-lengths --num-prompts $n \
      --arrival constant --request-rate $rate --warmup 1 >"$WORK/c.txt" 2>&1 || true
    [ -s "$WORK/c.json" ] || { cat "$WORK/c.txt"; exit 1; }
    python3 - "$WORK/c.csv" "$WORK/c.json" "$WORK/time" $streams <<'EOF'
import csv, json, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r['status'] == 'ok']
d = json.load(open(sys.argv[2]))
cpu = sum(float(x) for x in open(sys.argv[3]).read().split()[-2:])
streams = int(sys.argv[4])
# Full concurrency: from the end of the first stream's life (4 s) to the last arrival (8 s), 0.5 s
# trimmed at each side. A stream's events are spread evenly over [first token, end] (the synthetic
# truth is one event every 20 ms), so the events inside the window are each stream's chunk count
# times the part of its life inside the window.
t0, t1 = 4500.0, 7500.0
ev = 0.0
for r in rows:
    a, b, n = float(r['first_token_ms']), float(r['end_ms']), int(r['chunks'])
    if b > a:
        ev += n * max(0.0, min(b, t1) - max(a, t0)) / (b - a)
total = d['latency_ms']['itl']['count'] + d['counts']['completed']
print(f"{streams} streams (rate {streams // 4}/s): peak in flight {d['counts']['max_in_flight']}; "
      f"{ev / ((t1 - t0) / 1000):.0f} events/s at full concurrency; send lag p50 "
      f"{d['latency_ms']['send_lag']['p50']:.3f} p99 {d['latency_ms']['send_lag']['p99']:.3f} ms; "
      f"ITL p50 {d['latency_ms']['itl']['p50']:.2f} p99 {d['latency_ms']['itl']['p99']:.2f} ms (truth 20); "
      f"client CPU {cpu:.2f} s = {cpu * 1e6 / total:.2f} us/event; {d['counts']['failed']} failed")
EOF
  done
  stop_server
  ;;
contention)
  start_server --engine synthetic --ttft-ms 5 --itl-ms 2 ${SERVER_ARGS:-}
  HOGS=()
  for _ in $(seq 1 "$(nproc)"); do
    (while :; do :; done) &
    HOGS+=($!)
  done
  for r in $(seq 1 "$REPS"); do
    bench "$WORK/c$r.json" --input-len 64 --output-len 32 --num-prompts 200 --arrival burst --max-concurrency 4 \
      ${BENCH_ARGS:-}
    echo "run $r: send lag p50 $(field "$WORK/c$r.json" "round(d['latency_ms']['send_lag']['p50'], 3)") p99 \
$(field "$WORK/c$r.json" "round(d['latency_ms']['send_lag']['p99'], 3)") max \
$(field "$WORK/c$r.json" "round(d['latency_ms']['send_lag']['max'], 3)") ms; real-time pacing \
$(field "$WORK/c$r.json" "d['counts']['realtime_pacing']")"
  done
  kill "${HOGS[@]}"
  stop_server
  ;;
*)
  echo "unknown experiment $EXP" >&2
  exit 2
  ;;
esac
