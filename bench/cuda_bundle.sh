#!/usr/bin/env bash
# Packs binaries built with CUDA here (plumb, cuda_runner_test, cuda_runner_bench, the gpu-labelled tests) with the Debian
# libraries they link into DEST/cuda_bundle.tar.xz for the device host (bench/cuda_runs.sh unpacks
# it to /tmp/cbundle), and copies the device scripts (bench/cuda_*.sh, bench/cuda_ceilings.py) beside
# it. DEST is $PLUMB_BUNDLE_DIR, or .dev/cuda in this checkout (a folder git ignores, carried along). As bench/device_bundle.sh, but the CUDA libraries (cuBLAS, cuBLASLt, NVRTC, NCCL: 218 MB alone) are
# not carried: the run path points at the device's own /usr/local/cuda/lib64, and the driver's
# libcuda is found where the host keeps it. Needs patchelf.
# PLUMB_BUNDLE_ICU_STUB=1 replaces ICU's data library (31 MB, most of a plumb-only bundle) by a stub
# that defines its one symbol, so that plumb fits beside llama.cpp under the device call's carry
# limit (bench/cuda_peers.sh). ICU's NFC and NFD tables are built into libicuuc and still work;
# NFKC/NFKD normalizers then fail with "ICU normalizer unavailable" (no shipped or Llama-3
# tokenizer uses them).
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
  ldd "$bin" | awk '{print $3}' | grep / | grep -v -E 'libcublas|libcudart|libcuda\.|libnvrtc|libnccl' | xargs -I{} cp -L {} $B/lib/
done
cp -L /lib64/ld-linux-x86-64.so.2 $B/lib/
if [ "${PLUMB_BUNDLE_ICU_STUB:-0}" = 1 ]; then
  for f in $B/lib/libicudata.so.*; do
    [ -e "$f" ] || continue
    v=${f##*.so.}
    echo "const char icudt${v}_dat[64] __attribute__((aligned(16))) = {0};" |
      gcc -shared -fPIC -x c -o "$f" - -Wl,-soname,"$(basename "$f")"
  done
fi
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
