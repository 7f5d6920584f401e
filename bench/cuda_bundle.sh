#!/usr/bin/env bash
# Packs binaries built with CUDA here (plumb, cuda_runner_test, cuda_runner_bench, the gpu-labelled tests) with the Debian
# libraries they link into DEST/cuda_bundle.tar.xz for the device host (bench/cuda_runs.sh unpacks
# it to /tmp/cbundle), and copies the device scripts (bench/cuda_*.sh, bench/cuda_ceilings.py) beside
# it. DEST is $PLUMB_BUNDLE_DIR, or .dev/cuda in this checkout (a folder git ignores, carried along). As bench/device_bundle.sh, but the CUDA libraries (cuBLAS, cuBLASLt, NVRTC) are
# not carried: the run path points at the device's own /usr/local/cuda/lib64, and the driver's
# libcuda is found where the host keeps it. Needs patchelf.
# Usage: bench/cuda_bundle.sh BINARY...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/cuda_bundle.sh BINARY..." >&2; exit 2; }
command -v patchelf >/dev/null || { echo "bench/cuda_bundle.sh needs patchelf: apt-get install patchelf" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=/tmp/cbundle
DEST=${PLUMB_BUNDLE_DIR:-$ROOT/.dev/cuda}
rm -rf $B && mkdir -p $B/lib "$DEST"
for bin in "$@"; do
  cp "$bin" $B/
  ldd "$bin" | awk '{print $3}' | grep / | grep -v -E 'libcublas|libcudart|libcuda\.|libnvrtc' | xargs -I{} cp -L {} $B/lib/
done
cp -L /lib64/ld-linux-x86-64.so.2 $B/lib/
for bin in "$@"; do
  patchelf --set-interpreter $B/lib/ld-linux-x86-64.so.2 \
    --set-rpath "$B/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64" "$B/$(basename "$bin")"
done
for f in $B/lib/*.so*; do
  case $f in */ld-linux*) ;; *) patchelf --set-rpath '$ORIGIN' "$f" ;; esac
done
tar cJf "$DEST/cuda_bundle.tar.xz" -C /tmp cbundle
cp "$ROOT"/bench/cuda_*.sh "$ROOT/bench/cuda_ceilings.py" "$DEST/"
ls -la "$DEST"
