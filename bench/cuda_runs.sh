#!/bin/bash
# The CUDA runner's figures, in one call on the device host, from the repository root with the
# folder that bench/cuda_bundle.sh filled (default .dev/cuda: the bundle and these scripts) carried:
#  1. the GPU tests (tests/engine/cuda: logits against the CPU runner, greedy tokens, batch
#     invariance, CUDA graphs against eager launches, refusals) and `plumb generate --device cuda`
#     beside `--device cpu`;
#  2. the device's ceilings (cuda_ceilings.py: device-to-device copy bandwidth, bf16 GEMM peak);
#  3. cuda_runner_bench on the Llama-3-8B shape (models/configs/llama-3-8b, dummy bf16 weights):
#     decode step time at batch 1/8/64 after 1,024-token prompts (CUDA graphs on, the default, then
#     off for batches 1 and 64; then with SwiGLU not fused into the gate/up GEMV, which only batch 1
#     uses, and the GEMM algorithms not tuned, which only batches 8 and 64 use; then without
#     programmatic dependent launch), prefill of 8,192 tokens;
#  3b. the peer on the same shape (bench/cuda_peer_transformers.py: transformers with SDPA), unless
#     SKIP_PEER=1;
#  4. the ratios: decode step time over its HBM roofline (the bytes a step reads: every weight but
#     the embedding table, plus the KV of every sequence, over the measured copy bandwidth), and
#     prefill FLOP/s over the measured GEMM peak;
#  5. compute-sanitizer memcheck over the GPU tests (cuda_memcheck.sh), unless SKIP_MEMCHECK=1;
#  6. the other gpu-labelled tests where the bundle holds them (kernels_cuda_screen_gpu_test: cheats
#     refused, crash and hang contained, built-in variants screened; metrics_vram_gpu_test), against
#     the bundle's plumb (linked where the tests look for it, BUILD_SOURCE_DIR/build/ci/plumb);
#  6b. every 4th built-in CUDA kernel candidate of each op screened on the device (kernels_screen.jsonl:
#     verdict, median time);
#  7. with PROFILE=1, ncu per-kernel times of one decode step at batch 1 and 64 and of a prefill
#     (bench/cuda_profile.py), in profile.txt.
#  SKIP_ENGINE=1 skips stages 1-5, SKIP_SCREEN=1 stages 6 and 6b (a long run in two device calls);
#  PACK=1 leaves one archive, cuda_runs.tgz, of every output (a device call brings back few files).
#  8. with KERNELS=1, the kernels loop on the GPU: `plumb kernels profile --device cuda` on scenario D
#     (kernels_profile.json), `plumb kernels search --device cuda --op swiglu` over three episodes
#     (kernels_search.json), and one candidate screened without compute-sanitizer and under each
#     tool alone (sanitize_cost.jsonl: seconds per tool).
#  9. with ACCEPT=1, in-model acceptance on the GPU: the best of a short SwiGLU search (reused from
#     stage 8 when it ran in this call) measured in place of the runner's SwiGLU by `plumb kernels
#     accept --device cuda` on plumb-tiny, scenario D small, 5 pairs (kernels_accept.json, the
#     ledger's readout, the runner's description naming the candidate in the arms' logs).
# Usage: bash .dev/cuda/cuda_runs.sh [BUILD_SOURCE_DIR] — the source folder the test binary was
# built in (it finds models/ there): linked to this checkout when it does not exist here. Outputs
# under $OUT.
set -u
R=$(pwd)
H=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-$R/.dev/out}
mkdir -p "$O"
[ -x /tmp/cbundle/plumb ] || tar xJf "$H/cuda_bundle.tar.xz" -C /tmp
. "$H/cuda_nccl_env.sh"  # the host's NCCL may need a newer glibc than the bundle's
B=/tmp/cbundle
if [ -n "${1:-}" ] && [ ! -e "$1" ]; then mkdir -p "$(dirname "$1")" && ln -s "$R" "$1"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$O/device.txt"
export PLUMB_MODELS_DIR=$R/models

if [ "${SKIP_ENGINE:-0}" != 1 ]; then
echo "== 1. GPU tests"
"$B/cuda_runner_test" --gtest_color=no 2>&1 | tee "$O/gpu_tests.txt" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED|measured) |FAILED|Failure|error" | cut -c1-240
for dev in cpu cuda; do
  echo "-- plumb generate --device $dev"
  "$B/plumb" generate --device $dev --prompt "Q: What is 2 + 3?" --chat --max-tokens 24 --temperature 0 2>&1 | tail -7
done > "$O/generate.txt" 2>&1
tail -3 "$O/generate.txt"

echo "== 2. ceilings"
python3 "$H/cuda_ceilings.py" | tee "$O/ceilings.jsonl"

echo "== 3. Llama-3-8B shape, dummy bf16 weights"
"$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --prompt 1024 --steps 32 --batches 1,8,64 \
  --prefill 8192 | tee "$O/bench.jsonl"
"$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --prompt 1024 --steps 32 --batches 1,64 \
  --prefill 0 --short 0 --graphs 0 | tee -a "$O/bench.jsonl"
"$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --prompt 1024 --steps 32 --batches 1,8,64 \
  --prefill 0 --short 0 --fused-gemv 0 --gemm-tuning 0 | tee -a "$O/bench.jsonl"
"$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --prompt 1024 --steps 32 --batches 1,64 \
  --prefill 0 --short 0 --pdl 0 | tee -a "$O/bench.jsonl"

echo "== 3b. the peer: transformers (SDPA) on the same shape"
if [ "${SKIP_PEER:-0}" != 1 ]; then
  timeout 300 python3 "$R/bench/cuda_peer_transformers.py" models/configs/llama-3-8b/config.json --prompt 1024 \
    --steps 16 --batches 1,8,64 --prefill 8192 2> "$O/peer.err" | tee "$O/peer.jsonl" || tail -5 "$O/peer.err"
fi

echo "== 4. ratios"
python3 - "$O" <<'PY' | tee "$O/summary.txt"
import json, sys
o = sys.argv[1]
import os
files = ["ceilings.jsonl", "bench.jsonl"] + (["peer.jsonl"] if os.path.exists(f"{o}/peer.jsonl") else [])
rows = [json.loads(l) for f in files for l in open(f"{o}/{f}") if l.startswith("{")]
get = lambda m: [r for r in rows if r["measure"] == m and "peer" not in r]
peer = lambda m: [r for r in rows if r["measure"] == m and "peer" in r]
bw = get("copy")[0]["bytes_per_s"]; peak = get("gemm")[0]["flops_per_s"]
V, d, ff, L, nh, nkv, hd = 128256, 4096, 14336, 32, 32, 8, 128
lin = L * ((nh + 2 * nkv) * hd * d + d * nh * hd + 3 * ff * d)           # linear weights per token
w_bytes = 2 * (lin + V * d) + 4 * (L * 2 * d + d)                        # + lm_head, norms; no embedding
kv_tok = 2 * L * nkv * hd * 2                                            # bf16 K and V, bytes per token
print(f"device {get('copy')[0]['device']}: copy {bw/1e12:.3f} TB/s, bf16 GEMM {peak/1e12:.1f} TFLOP/s")
print(f"weights read per step (no embedding) {w_bytes/1e9:.3f} GB, KV {kv_tok/1e3:.0f} kB per token of context")
for r in get("decode"):
    b, ctx = r["batch"], r["context"]
    roof = (w_bytes + b * ctx * kv_tok) / bw * 1e3
    roof_nl = (w_bytes - 2 * V * d + b * ctx * kv_tok) / bw * 1e3   # a step with no logits skips lm_head
    print(f"decode graphs {r.get('graphs', 0)} fused {r.get('fused_gemv', 1)} tuned {r.get('gemm_tuning', 0)} pdl {r.get('pdl', 0)} batch {b:3d} ctx {ctx}: step {r['median_ms']:.3f} ms (min {r['min_ms']:.3f}), "
          f"roofline {roof:.3f} ms, ratio {r['median_ms']/roof:.3f}; {b/r['median_ms']*1e3:.0f} tok/s; no logits "
          f"{r['no_logits_median_ms']:.3f} ms over {roof_nl:.3f} (ratio {r['no_logits_median_ms']/roof_nl:.3f}); "
          f"greedy on the device {r['greedy_median_ms']:.3f} ms (ratio {r['greedy_median_ms']/roof:.3f})")
for r in peer("decode"):
    b = r["batch"]
    ours = [x for x in get("decode") if x["batch"] == b and x.get("graphs", 0) == 1 and x["context"] > 512]
    mine = f"; plumb (greedy on the device) {ours[0]['greedy_median_ms']:.3f} ms = {r['median_ms']/ours[0]['greedy_median_ms']:.2f}x faster" if ours else ""
    print(f"peer transformers decode batch {b:3d} ctx {r['context']}: {r['median_ms']:.3f} ms{mine}")
for r in peer("prefill"):
    ours = [x for x in get("prefill") if x["tokens"] == r["tokens"]]
    mine = f"; plumb {ours[0]['median_ms']:.1f} ms = {r['median_ms']/ours[0]['median_ms']:.2f}x faster" if ours else ""
    print(f"peer transformers prefill {r['tokens']}: {r['median_ms']:.1f} ms{mine}")
for r in get("prefill"):
    T, t = r["tokens"], r["median_ms"] / 1e3
    gemm = 2 * (lin * T + V * d)                      # linear layers over T rows + lm_head for the last row
    attn = 4 * (T * (T + 1) / 2) * nh * hd * L        # QK and PV over the causal triangle
    print(f"prefill {T} tokens: {r['median_ms']:.1f} ms = {T/t:.0f} tok/s; GEMM FLOPs {gemm/t/1e12:.1f} TFLOP/s = "
          f"{gemm/t/peak:.3f} of peak; with attention {(gemm+attn)/t/1e12:.1f} TFLOP/s = {(gemm+attn)/t/peak:.3f}")
PY

if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
  echo "== 5. compute-sanitizer memcheck"
  bash "$H/cuda_memcheck.sh"
fi
fi  # SKIP_ENGINE

if [ "${SKIP_SCREEN:-0}" != 1 ]; then
echo "== 6. other gpu tests"
if [ -n "${1:-}" ]; then
  mkdir -p "$1/build/ci" && ln -sf "$B/plumb" "$1/build/ci/plumb"
fi
for t in kernels_cuda_screen_gpu_test metrics_vram_gpu_test; do
  [ -x "$B/$t" ] || continue
  timeout 420 "$B/$t" --gtest_color=no > "$O/$t.txt" 2>&1
  echo "$t: rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$O/$t.txt" | tr '\n' ' ')"
  grep -E "Failure|FAILED  \]" "$O/$t.txt" | head -20
done

echo "== 6b. built-in CUDA candidates screened and timed (every 4th of each op, 256 x 4096)"
if [ -x "$B/plumb" ]; then
  for op in rmsnorm_residual swiglu; do
    rm -rf "/tmp/v_$op" && "$B/plumb" kernels generate --device cuda --op $op --out "/tmp/v_$op" > /dev/null
    i=0
    for f in /tmp/v_$op/*.cu; do
      i=$((i + 1)); [ $((i % 4)) = 1 ] || continue
      timeout 120 "$B/plumb" kernels screen --device cuda --op $op --source "$f" --rows 256 --dim 4096 --json --sanitizers none \
        --out "/tmp/s_$op.$i" 2> /dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)['screen']
print(json.dumps({'op': '$op', 'variant': '$(basename "$f" .cu)', 'verdict': j['verdict'],
                  'median_us': j['time_us']['median'], 'implied_gb_s': j['implied_gb_s'],
                  'copy_gb_s': j['copy_gb_s']}))" \
        >> "$O/kernels_screen.jsonl" || echo "{\"op\": \"$op\", \"variant\": \"$(basename "$f" .cu)\", \"verdict\": \"error\"}" >> "$O/kernels_screen.jsonl"
    done
  done
  cat "$O/kernels_screen.jsonl"
fi
fi  # SKIP_SCREEN

if [ "${PROFILE:-0}" = 1 ]; then
  echo "== 7. ncu: kernels of one decode step (batch 1, 64) and a prefill"
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 400 "$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
    "$B/cuda_runner_bench" models/configs/llama-3-8b/config.json --prompt 1024 --steps 4 --batches 1,64 \
    --prefill 2048 --short 0 --profile 1 > "$O/profile.csv" 2> "$O/profile.err"
  python3 "$R/bench/cuda_profile.py" "$O/profile.csv" decode-b1 decode-b64 prefill-2048 > "$O/profile.txt" 2>&1
  head -80 "$O/profile.txt"
fi

if [ "${KERNELS:-0}" = 1 ] && [ -x "$B/plumb" ]; then
  echo "== 8. the kernels loop on the GPU: profile, search, the cost of compute-sanitizer"
  # The runner's ops timed with CUDA events on scenario D (small) over plumb-tiny, and the overhead.
  timeout 120 "$B/plumb" kernels profile --device cuda --workload D --requests 16 --json \
    --out "$O/kernels_profile.json" > /dev/null 2> "$O/kernels_profile.err"
  echo "kernels profile: rc $?"
  # Three episodes of six built-in SwiGLU candidates, then the best confirmed and sanitized.
  SECONDS=0
  timeout 300 "$B/plumb" kernels search --device cuda --op swiglu --episodes 3 --candidates 6 \
    --out /tmp/search_swiglu --json > "$O/kernels_search.json" 2> "$O/kernels_search.err"
  echo "kernels search: rc $? in ${SECONDS} s"
  # One candidate screened without tools, then under each tool alone: the seconds each costs.
  rm -rf /tmp/v_rms && "$B/plumb" kernels generate --device cuda --op rmsnorm_residual --out /tmp/v_rms > /dev/null
  src=$(ls /tmp/v_rms/*.cu | head -1)
  for tools in none memcheck racecheck initcheck; do
    t0=$EPOCHREALTIME
    timeout 300 "$B/plumb" kernels screen --device cuda --op rmsnorm_residual --source "$src" --json \
      --sanitizers $tools --out "/tmp/san_$tools" > "$O/sanitize_$tools.json" 2> /dev/null
    rc=$?
    secs=$(python3 -c "print(round($EPOCHREALTIME - $t0, 3))")
    echo "{\"sanitizers\": \"$tools\", \"rc\": $rc, \"seconds\": $secs, \"variant\": \"$(basename "$src" .cu)\"}" |
      tee -a "$O/sanitize_cost.jsonl"
  done
fi

if [ "${ACCEPT:-0}" = 1 ] && [ -x "$B/plumb" ]; then
  echo "== 9. in-model acceptance on the GPU: plumb kernels accept --device cuda"
  if [ ! -f /tmp/search_swiglu/search.json ]; then
    timeout 200 "$B/plumb" kernels search --device cuda --op swiglu --episodes 2 --candidates 4 \
      --out /tmp/search_swiglu --json > "$O/kernels_search.json" 2> "$O/kernels_search.err"
    echo "kernels search: rc $?"
  fi
  SECONDS=0
  rm -rf /tmp/accept && mkdir -p /tmp/accept
  timeout 420 "$B/plumb" kernels accept --device cuda --search /tmp/search_swiglu --ledger /tmp/accept/plumb.db \
    --out /tmp/accept/kernels.json --work-dir /tmp/accept --pairs 5 --json \
    > "$O/kernels_accept.json" 2> "$O/kernels_accept.err"
  echo "kernels accept: rc $? in ${SECONDS} s"
  tail -5 "$O/kernels_accept.err"
  "$B/plumb" compare list --ledger /tmp/accept/plumb.db > "$O/kernels_accept_list.txt" 2>&1
  grep -h "candidate kernels" /tmp/accept/*.log 2>/dev/null | head -2 > "$O/kernels_accept_runner.txt"
  cp /tmp/accept/*.toml /tmp/accept/*.json "$O/" 2>/dev/null
fi

# A device call brings back only a few files: PACK=1 leaves one archive of every output instead.
if [ "${PACK:-0}" = 1 ]; then
  tar czf /tmp/cuda_runs.tgz -C "$O" . && find "$O" -mindepth 1 -delete && mv /tmp/cuda_runs.tgz "$O/"
  echo "outputs packed into $O/cuda_runs.tgz"
fi
