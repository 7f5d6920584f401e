#!/usr/bin/env bash
# The main job on the embedded default: installs dependencies, builds plumb (release), starts
# plumb's own reference engine (`plumb serve`, shipped model models/plumb-tiny) on a free port,
# and measures it with `plumb bench` on protocol scenario D (general), small size class.
# Extra arguments go to `plumb bench` (e.g. --scenario A, --json out.json, --csv out.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target plumb
plumb=./build/release/plumb
log=$(mktemp /tmp/plumb-serve.XXXXXX.log)
"$plumb" serve --port 0 >"$log" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 120); do
  url=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -1 | sed 's/listening on //') || true
  [ -n "$url" ] && break
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    echo "plumb serve exited before it was ready; its log ($log):" >&2
    cat "$log" >&2
    exit 3
  fi
  sleep 0.5
done
if [ -z "$url" ]; then
  echo "plumb serve did not become ready within 60 s; its log: $log" >&2
  exit 3
fi
echo "plumb serve is up at $url (log: $log); running plumb bench --scenario D --size small"
"$plumb" bench --target "$url" --scenario D --size small --tokenizer models/plumb-tiny "$@"
