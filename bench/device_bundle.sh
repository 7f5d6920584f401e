#!/usr/bin/env bash
# Packs a plumb binary with the Debian 12 libraries it links (and their loader) into
# .dev/bundle.tar.xz, so that it runs on a host with another distribution (the Xeon device host of
# BENCHMARKS.md, "Machines"). The binary's interpreter and every library's run path point
# into /tmp/bundle, where bench/device_runs.sh unpacks it. Needs patchelf (apt-get install patchelf;
# not part of scripts/setup.sh: only this script uses it).
# Usage: bench/device_bundle.sh PLUMB_BINARY
set -euo pipefail
BIN=${1:?usage: bench/device_bundle.sh PLUMB_BINARY}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf /tmp/bundle && mkdir -p /tmp/bundle/lib "$ROOT/.dev"
cp "$BIN" /tmp/bundle/plumb
ldd "$BIN" | awk '{print $3}' | grep / | xargs -I{} cp -L {} /tmp/bundle/lib/
cp -L /lib64/ld-linux-x86-64.so.2 /tmp/bundle/lib/
patchelf --set-interpreter /tmp/bundle/lib/ld-linux-x86-64.so.2 --set-rpath /tmp/bundle/lib /tmp/bundle/plumb
for f in /tmp/bundle/lib/*.so*; do
  case $f in */ld-linux*) ;; *) patchelf --set-rpath '$ORIGIN' "$f" ;; esac
done
env -i /tmp/bundle/plumb --version
tar cJf "$ROOT/.dev/bundle.tar.xz" -C /tmp bundle
grep -qx '/.dev/' "$(git -C "$ROOT" rev-parse --git-dir)/info/exclude" 2>/dev/null ||
  echo /.dev/ >>"$(git -C "$ROOT" rev-parse --git-dir)/info/exclude"
ls -la "$ROOT/.dev/bundle.tar.xz"
