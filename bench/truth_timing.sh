#!/usr/bin/env bash
# Timing error of `plumb bench` against an independent server (docs/metrics.md, "Timing error against
# an independent server"): the truth server (tests/tools/truth_server.c, plain C, its own
# CLOCK_MONOTONIC stamps, a seeded schedule of TTFT and inter-token gaps) is driven by plumb bench at
# concurrency 1, 4, 20 (burst) and 1,000 streams; each request's TTFT, TPOT and ITL as plumb measured
# them are compared with the same figures from the server's stamps (bench/truth_timing.py) and a
# table of median / p99 / max |error| is printed.
#
# Usage: bench/truth_timing.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  holds plumb and tests/tools/truth_server (default build/ci)
#   OUT_DIR    keeps the CSVs, stamps and per-case JSON (default a fresh temporary folder)
# CASES overrides the cases: "label:concurrency:requests ..." (default below). TTFT and ITL set the
# server's distributions (default uniform:5:15 and uniform:1:3 ms); OUTPUT_LEN (default 16) and
# INPUT_LEN (default 64) the request lengths; STREAMS_ITL the gaps at concurrency >= 100 (default
# uniform:15:25); REALTIME the server's SCHED_FIFO priority (default 1, 0 = normal process); WARMUP the warmup requests (default 1: most connections
# of a burst are then opened inside the measured phase). CLIENT_CPUS / SERVER_CPUS pin with taskset.
set -euo pipefail
BUILD=${1:-build/ci}
OUT=${2:-$(mktemp -d /tmp/truth_timing.XXXXXX)}
PLUMB=$BUILD/plumb
SERVER=$BUILD/tests/tools/truth_server
HERE=$(cd "$(dirname "$0")" && pwd)
CASES=${CASES:-"c1:1:100 c4:4:200 c20:20:400 c1000:1000:2000"}
TTFT=${TTFT:-uniform:5:15}
ITL=${ITL:-uniform:1:3}
OUTPUT_LEN=${OUTPUT_LEN:-16}
INPUT_LEN=${INPUT_LEN:-64}
WARMUP=${WARMUP:-1}
pin() { if [ -n "${1:-}" ]; then echo "taskset -c $1"; fi; }
[ -x "$PLUMB" ] && [ -x "$SERVER" ] || { echo "build plumb and truth_server first: cmake --build $BUILD --target plumb truth_server" >&2; exit 2; }
mkdir -p "$OUT"
ulimit -n 8192 2>/dev/null || true

echo "# $(date -u +%FT%TZ)  $(uname -n)  $(nproc) cpus  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# server --ttft $TTFT --itl $ITL (concurrency >= 100: --itl ${STREAMS_ITL:-uniform:15:25}); requests --input-len $INPUT_LEN --output-len $OUTPUT_LEN, warmup $WARMUP"
echo "# error = plumb - server, ms; |error| columns are absolute values"
printf "%-12s %-12s %6s %10s %10s %10s %10s\n" case metric n "p50|err|" "p99|err|" "max|err|" "p50 err"
for c in $CASES; do
  IFS=: read -r label conc n <<<"$c"
  ctt=$TTFT citl=$ITL
  # 1,000 streams at a 2 ms gap would be 500k events/s: more than this client and server can carry
  # on a small machine, so the many-stream case uses a longer gap (STREAMS_ITL).
  if [ "$conc" -ge 100 ]; then citl=${STREAMS_ITL:-uniform:15:25}; fi
  rm -f "$OUT/$label.port"
  $(pin "${SERVER_CPUS:-}") "$SERVER" --port-file "$OUT/$label.port" --stamps "$OUT/$label.stamps.jsonl" \
    --seed 7 --ttft "$ctt" --itl "$citl" --realtime "${REALTIME:-1}" >"$OUT/$label.server.log" 2>&1 &
  spid=$!
  for _ in $(seq 100); do [ -s "$OUT/$label.port" ] && break; sleep 0.05; done
  port=$(cat "$OUT/$label.port")
  rc=0
  $(pin "${CLIENT_CPUS:-}") "$PLUMB" bench --target "http://127.0.0.1:$port" --input-len "$INPUT_LEN" \
    --output-len "$OUTPUT_LEN" --num-prompts "$n" --max-concurrency "$conc" --warmup "$WARMUP" --seed 21 \
    --csv "$OUT/$label.csv" --json "$OUT/$label.bench.json" --quiet >"$OUT/$label.bench.log" 2>&1 || rc=$?
  kill -TERM "$spid"
  wait "$spid" || true
  [ "$rc" -le 1 ] || { echo "plumb bench failed ($rc): $OUT/$label.bench.log" >&2; exit 1; }
  python3 "$HERE/truth_timing.py" "$label" "$OUT/$label.csv" "$OUT/$label.stamps.jsonl" --json "$OUT/$label.json"
done
echo "# files: $OUT"
