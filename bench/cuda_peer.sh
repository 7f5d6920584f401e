#!/bin/bash
# plumb's CUDA runner beside llama.cpp's CUDA build, same shape, same card, same call, on the device
# host, from the repository root with .dev/cuda_bundle.tar.xz (bench/cuda_bundle.sh) carried along.
#
# Usage: bench/cuda_peer.sh LLAMA_DIR TOKENIZER_DIR [CONFIG_NAME]
#   LLAMA_DIR      a llama.cpp source tree built for CUDA (LLAMA_DIR/build/bin/llama-bench and
#                  LLAMA_DIR/convert_hf_to_gguf.py); plumb does not build or ship it.
#   TOKENIZER_DIR  tokenizer.json + tokenizer_config.json of the model family (Llama 3 for the
#                  default), needed by the GGUF conversion.
#   CONFIG_NAME    a folder under models/configs (default llama-3.2-1b).
# Steps: a random-weight Hugging Face folder of CONFIG_NAME's shape (transformers, bf16), converted
# to GGUF bf16; the device's ceilings (bench/cuda_ceilings.py); llama-bench pp512/tg128 with flash
# attention off and on; bench/cuda_runner_bench at batch 1/8/64 after a 64-token prompt and a
# 512-token prefill; then one table: time per token and prefill tokens/s of both, each decode step
# over its HBM roofline (weights read per step, without the embedding table, over the measured
# copy bandwidth). Outputs under $OUT.
set -u
LLAMA=${1:?usage: bench/cuda_peer.sh LLAMA_DIR TOKENIZER_DIR [CONFIG_NAME]}
TOK=${2:?usage: bench/cuda_peer.sh LLAMA_DIR TOKENIZER_DIR [CONFIG_NAME]}
NAME=${3:-llama-3.2-1b}
R=$(pwd)
O=${OUT:-$R/.dev/out}
mkdir -p "$O"
tar xJf .dev/cuda_bundle.tar.xz -C /tmp
B=/tmp/cbundle
CFG=$R/models/configs/$NAME/config.json
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$O/device.txt"

echo "== HF folder and GGUF ($NAME, random bf16 weights)"
python3 - "$CFG" "$TOK" /tmp/hf_model <<'PY' 2>&1 | tail -3
import json, shutil, sys, torch, transformers
cfg = transformers.LlamaConfig(**json.load(open(sys.argv[1])))
torch.manual_seed(0)
with torch.device("cuda"):
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(sys.argv[3], safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{sys.argv[2]}/{f}", f"{sys.argv[3]}/{f}")
print("saved", sys.argv[3])
PY
python3 "$LLAMA/convert_hf_to_gguf.py" /tmp/hf_model --outtype bf16 --outfile /tmp/model.gguf > "$O/convert.log" 2>&1 ||
  { echo "GGUF conversion failed:"; tail -5 "$O/convert.log"; }

echo "== ceilings"
python3 bench/cuda_ceilings.py | tee "$O/ceilings.jsonl"

echo "== llama-bench"
"$LLAMA/build/bin/llama-bench" -m /tmp/model.gguf -ngl 99 -p 512 -n 128 -fa 0,1 -r 5 -o json > "$O/llama_bench.json" 2> "$O/llama_bench.err" ||
  tail -5 "$O/llama_bench.err"

echo "== plumb cuda_runner_bench"
"$B/cuda_runner_bench" "$CFG" --prompt 64 --steps 128 --batches 1,8,64 --prefill 512 | tee "$O/plumb_bench.jsonl"

echo "== summary"
python3 - "$O" "$CFG" <<'PY' | tee "$O/summary.txt"
import json, sys
o, cfg = sys.argv[1], json.load(open(sys.argv[2]))
rows = [json.loads(l) for f in ("ceilings.jsonl", "plumb_bench.jsonl") for l in open(f"{o}/{f}") if l.startswith("{")]
get = lambda m: [r for r in rows if r["measure"] == m]
bw = get("copy")[0]["bytes_per_s"]
d, ff, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim") or d // nh
lin = L * ((nh + 2 * nkv) * hd * d + d * nh * hd + 3 * ff * d)
w_bytes = 2 * (lin + V * d)            # linear layers + lm_head (tied or not, it is read), bf16; no embedding gather
kv_tok = 2 * L * nkv * hd * 2
print(f"device {get('copy')[0]['device']}: copy {bw/1e12:.3f} TB/s; weights read per decode step {w_bytes/1e9:.3f} GB")
try:
    lb = json.load(open(f"{o}/llama_bench.json"))
except Exception as e:
    lb = []
    print("llama-bench: no results", e)
tg = {}
for r in lb:
    ms_tok = 1e3 / r["avg_ts"]
    kind = "pp" if r["n_prompt"] else "tg"
    n = r["n_prompt"] or r["n_gen"]
    fa = r.get("flash_attn")
    if kind == "tg":
        roof = (w_bytes + (n / 2) * kv_tok) / bw * 1e3
        tg[fa] = ms_tok
        print(f"llama.cpp tg{n} fa={fa}: {ms_tok:.3f} ms/token ({r['avg_ts']:.0f} tok/s), roofline {roof:.3f} ms, ratio {ms_tok/roof:.3f}")
    else:
        print(f"llama.cpp pp{n} fa={fa}: {r['avg_ts']:.0f} tok/s")
for r in get("decode"):
    b, ctx = r["batch"], r["context"]
    roof = (w_bytes + b * ctx * kv_tok) / bw * 1e3
    line = (f"plumb decode batch {b} ctx {ctx}: {r['median_ms']:.3f} ms/step ({b/r['median_ms']*1e3:.0f} tok/s), "
            f"roofline {roof:.3f} ms, ratio {r['median_ms']/roof:.3f}")
    if b == 1 and tg:
        best = min(tg.values())
        line += f"; llama.cpp's best tg over plumb's step: {best/r['median_ms']:.2f}x"
    print(line)
for r in get("prefill"):
    print(f"plumb prefill {r['tokens']} tokens: {r['median_ms']:.2f} ms = {r['tokens']/r['median_ms']*1e3:.0f} tok/s")
PY
