#!/usr/bin/env bash
# Soak test of `plumb serve` (not a CI test; docs/fuzzing.md, "Soak"): starts the server with the
# shipped model on loopback, drives --streams concurrent streams (default 1,000) with random
# disconnects and malformed requests mixed in for --duration seconds (default 600), then checks
# that the server survived: alive and healthy, no 5xx answer, every request finished and every KV
# block freed (/metrics), and its RSS at the end within 10% of its RSS after the warm-up.
# Bounded and self-stopping: the load ends at the deadline, stragglers get a grace period, and the
# server is stopped on exit whatever happens. Exit status 0 when every check passed.
#
#   scripts/soak.sh                              10 minutes, 1,000 streams
#   scripts/soak.sh --duration 180 --streams 1000 --warmup 30
#   PLUMB_BIN=build/ci/plumb scripts/soak.sh     another plumb binary (default build/release/plumb)
#
# Extra arguments after -- go to `plumb serve` (e.g. -- --max-num-seqs 64).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=600
streams=1000
warmup=60
serve_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --) shift; serve_args=("$@"); break ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=${PLUMB_BIN:-build/release/plumb}
if [ ! -x "$bin" ]; then
  echo "soak: no plumb binary at $bin (cmake --preset release && cmake --build --preset release, or set PLUMB_BIN)" >&2
  exit 2
fi
# 1,000 client sockets here and as many in the server: lift the soft descriptor limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

out=${PLUMB_SOAK_DIR:-build/soak}
mkdir -p "$out"
log=$out/serve.log
"$bin" serve --port 0 "${serve_args[@]}" >"$log" 2>&1 &
pid=$!
cleanup() {
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://[0-9.]*:\([0-9]*\).*|\1|p' "$log" | head -1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "soak: plumb serve exited at start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done
[ -n "$port" ] || { echo "soak: plumb serve did not get ready in 60 s" >&2; exit 1; }
echo "soak: plumb serve pid $pid on port $port; $streams streams for $duration s (warm-up $warmup s) $(date -u +%H:%M:%S)"

# The driver is bounded by its own deadline plus a grace period; timeout is the last resort.
timeout $((${duration%.*} + 480)) python3 scripts/soak_driver.py --port "$port" --server-pid "$pid" \
  --streams "$streams" --duration "$duration" --warmup "$warmup" >"$out/result.json"
alive=0
kill -0 "$pid" 2>/dev/null && alive=1

python3 - "$out/result.json" "$alive" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
alive = sys.argv[2] == "1" and r["server_alive"]
checks = [
    ("server alive and healthy", alive and r["health_status"] == 200, "alive=%s /health=%s" % (alive, r["health_status"])),
    ("no 5xx", r["five_xx"] == 0, "%d 5xx %s" % (r["five_xx"], r["five_xx_examples"])),
    ("requests drained", r["running_at_end"] == 0 and r["waiting_at_end"] == 0,
     "running=%s waiting=%s" % (r["running_at_end"], r["waiting_at_end"])),
    ("KV blocks back to 0", r["kv_blocks_used_at_end"] == 0, "kv_cache_blocks_used=%s" % r["kv_blocks_used_at_end"]),
    ("RSS within 10% of warm-up", r["rss_ratio"] is not None and r["rss_ratio"] <= 1.10,
     "%s kB after warm-up, %s kB at the end (x%s)" % (r["rss_kb_after_warmup"], r["rss_kb_at_end"], r["rss_ratio"])),
]
print("soak: %d requests in %.0f s over %d streams: %s" % (r["requests"], r["duration_s"], r["streams"],
      ", ".join("%s %d" % kv for kv in sorted(r["by_kind"].items()) if not kv[0].startswith("malformed:"))
      + ", malformed %d" % sum(v for k, v in r["by_kind"].items() if k.startswith("malformed:"))))
print("soak: statuses %s; streams completed %d, cut short %d; client errors %s" % (
      r["statuses"], r["completed_streams"], r["truncated_streams"], r["client_errors"] or "none"))
ok = True
for name, passed, detail in checks:
    print("  [%s] %-26s %s" % ("pass" if passed else "FAIL", name, detail))
    ok = ok and passed
sys.exit(0 if ok else 1)
PY
