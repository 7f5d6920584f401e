#!/usr/bin/env python3
"""A Hugging Face model folder of a Llama-family shape with random bf16 weights, for the peers of
bench/cuda_peers.sh (llama.cpp's converter, plumb serve --model, transformers) to load the same
model.

  python3 bench/cuda_hf_model.py CONFIG_JSON OUT_DIR --tokenizer DIR [--seed 0] [--set KEY=VALUE]...

Writes OUT_DIR/config.json (CONFIG_JSON with --set overrides, torch_dtype bfloat16),
OUT_DIR/model.safetensors (every weight of LlamaForCausalLM, bf16; the RMSNorm weights 1.0) and
the tokenizer files of DIR (tokenizer.json, or tokenizer.json.xz unpacked; tokenizer_config.json).
The vocabulary of the config must cover the tokenizer's ids.

Weights: with torch and a CUDA device, each tensor is drawn on the GPU from N(0, initializer_range)
with a generator seeded by --seed (8B parameters in seconds); otherwise (no torch, or it fails)
from a pool of 2^24 seeded random bf16 values of magnitude 2^-9 to 2^-5 and either sign, each tensor
reading it cyclically from its own offset: no dependency beyond the standard library, fast enough
for any size, and the same bytes for the same seed. Either way the values are finite and small, so
a forward pass stays finite; nothing here is meant to generate sensible text.

--set KEY=VALUE overrides a config field (integers, floats, true/false, null, else a string), e.g.
a tiny model with the real vocabulary for a CPU test:
  --set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=2
  --set num_attention_heads=4 --set num_key_value_heads=2
"""
import argparse
import json
import lzma
import os
import random
import shutil
import struct
import sys

POOL_ELEMS = 1 << 24


def parse_value(text):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(text, text)


def tensor_shapes(cfg):
    """(name, shape, kind) of every LlamaForCausalLM weight; kind is "norm", "bias" or "linear"."""
    if cfg.get("model_type") not in ("llama", "mistral"):
        sys.exit(f"cuda_hf_model.py: model_type {cfg.get('model_type')!r}: only llama and mistral shapes are made")
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or d // nh
    out = [("model.embed_tokens.weight", [v, d], "linear")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [d], "norm"),
                (p + "self_attn.q_proj.weight", [nh * hd, d], "linear"),
                (p + "self_attn.k_proj.weight", [nkv * hd, d], "linear"),
                (p + "self_attn.v_proj.weight", [nkv * hd, d], "linear"),
                (p + "self_attn.o_proj.weight", [d, nh * hd], "linear")]
        if cfg.get("attention_bias"):
            out += [(p + "self_attn.q_proj.bias", [nh * hd], "bias"),
                    (p + "self_attn.k_proj.bias", [nkv * hd], "bias"),
                    (p + "self_attn.v_proj.bias", [nkv * hd], "bias")]
        out += [(p + "post_attention_layernorm.weight", [d], "norm"),
                (p + "mlp.gate_proj.weight", [ff, d], "linear"),
                (p + "mlp.up_proj.weight", [ff, d], "linear"),
                (p + "mlp.down_proj.weight", [d, ff], "linear")]
    out.append(("model.norm.weight", [d], "norm"))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", [v, d], "linear"))
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def header_bytes(shapes):
    """The safetensors header: 8-byte length, then JSON padded with spaces to a multiple of 8."""
    meta = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, _ in shapes:
        n = 2 * numel(shape)
        meta[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def pool_writer(seed):
    """Writes tensors from a seeded pool of random bf16 values (little-endian)."""
    rng = random.Random(seed)
    # High byte: sign and the upper 7 exponent bits (59 or 60); with the low byte's top bit the
    # exponent field is 118..121, so |x| is in [2^-9, 2^-5).
    high_table = bytes((0x80 if i & 1 else 0) | (59 + ((i >> 1) & 1)) for i in range(256))
    low = b"".join(rng.randbytes(1 << 20) for _ in range(POOL_ELEMS >> 20))
    high = b"".join(rng.randbytes(1 << 20) for _ in range(POOL_ELEMS >> 20)).translate(high_table)
    pool = bytearray(2 * POOL_ELEMS)
    pool[0::2] = low
    pool[1::2] = high
    pool = memoryview(bytes(pool))
    one = struct.pack("<H", 0x3F80)  # bf16 1.0

    def write(f, index, shape, kind):
        n = numel(shape)
        if kind == "norm":
            f.write(one * n)
            return
        start = (index * 2654435761) % POOL_ELEMS  # a different offset per tensor
        while n > 0:
            take = min(n, POOL_ELEMS - start)
            f.write(pool[2 * start:2 * (start + take)])
            n -= take
            start = 0

    return write


def torch_writer(seed, std):
    """Writes tensors drawn on the GPU from N(0, std); None where torch or CUDA is missing."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)

    def write(f, index, shape, kind):
        del index
        if kind == "norm":
            t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            t = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
            t.normal_(0.0, std, generator=gen)
        f.write(t.view(torch.int16).cpu().numpy().tobytes())

    return write


def write_weights(path, shapes, write):
    with open(path, "wb") as f:
        f.write(header_bytes(shapes))
        for i, (_, shape, kind) in enumerate(shapes):
            write(f, i, shape, kind)
    expected = len(header_bytes(shapes)) + sum(2 * numel(s) for _, s, _ in shapes)
    if os.path.getsize(path) != expected:
        raise RuntimeError(f"{path}: {os.path.getsize(path)} bytes written, {expected} expected")


def copy_tokenizer(src, out):
    cfg = os.path.join(src, "tokenizer_config.json")
    if not os.path.exists(cfg):
        sys.exit(f"cuda_hf_model.py: {cfg} is missing (--tokenizer names a folder with tokenizer_config.json "
                 "and tokenizer.json or tokenizer.json.xz)")
    shutil.copyfile(cfg, os.path.join(out, "tokenizer_config.json"))
    plain, packed = os.path.join(src, "tokenizer.json"), os.path.join(src, "tokenizer.json.xz")
    if os.path.exists(plain):
        shutil.copyfile(plain, os.path.join(out, "tokenizer.json"))
    elif os.path.exists(packed):
        with lzma.open(packed) as fin, open(os.path.join(out, "tokenizer.json"), "wb") as fout:
            shutil.copyfileobj(fin, fout)
    else:
        sys.exit(f"cuda_hf_model.py: neither {plain} nor {packed} exists")
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    ids = list(tok.get("model", {}).get("vocab", {}).values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1 if ids else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json(.xz) and tokenizer_config.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-torch", action="store_true", help="use the seeded pool even where torch and CUDA exist")
    a = ap.parse_args()
    with open(a.config, encoding="utf-8") as f:
        cfg = json.load(f)
    for kv in a.set:
        if "=" not in kv:
            sys.exit(f"cuda_hf_model.py: --set {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        cfg[k] = parse_value(v)
    cfg["torch_dtype"] = "bfloat16"
    os.makedirs(a.out, exist_ok=True)
    vocab_needed = copy_tokenizer(a.tokenizer, a.out)
    if vocab_needed > cfg["vocab_size"]:
        sys.exit(f"cuda_hf_model.py: the tokenizer has ids up to {vocab_needed - 1}, the config's vocab_size is "
                 f"{cfg['vocab_size']}: give a config (or --set vocab_size=) that covers it")
    shapes = tensor_shapes(cfg)
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    params = sum(numel(s) for _, s, _ in shapes)
    path = os.path.join(a.out, "model.safetensors")
    how = "seeded pool"
    write = None if a.no_torch else torch_writer(a.seed, float(cfg.get("initializer_range", 0.02)))
    if write is not None:
        try:
            write_weights(path, shapes, write)
            how = "torch on the GPU"
        except Exception as e:  # a torch that cannot do it: the pool still gives the folder
            print(f"cuda_hf_model.py: torch failed ({e!r}); using the seeded pool", file=sys.stderr)
            write = None
    if write is None:
        write_weights(path, shapes, pool_writer(a.seed))
    print(json.dumps({"hf_model": a.out, "parameters": params, "tensors": len(shapes),
                      "bytes": os.path.getsize(path), "weights": how, "seed": a.seed}))


if __name__ == "__main__":
    main()
