#!/usr/bin/env python3
"""The peer beside cuda_runner_bench: Hugging Face transformers (PyTorch eager, SDPA attention) on the
same model shape with random bf16 weights, timed the same way on the same card.

  python3 bench/cuda_peer_transformers.py CONFIG_JSON [--prompt 1024] [--steps 16] [--batches 1,8,64]
                                          [--prefill 8192]

Prints one JSON object per measure on stdout, as cuda_runner_bench does, with "peer": "transformers":
decode step time (median over `steps` steps of one token per sequence, after B prompts of `prompt`
tokens, the logits of the last position computed, no sampling) and the prefill of `prefill` tokens
(median of 3 after a warm-up, logits of the last position only). A step's time runs from the call
to torch.cuda.synchronize() after it. Needs torch and transformers (both on the device host).
"""
import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prefill", type=int, default=8192)
    a = ap.parse_args()
    cfg = LlamaConfig(**json.load(open(a.config)))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, torch_dtype=torch.bfloat16).eval()
    print(json.dumps({"measure": "setup", "peer": "transformers", "torch": torch.__version__,
                      "init_s": round(time.perf_counter() - t0, 2)}), flush=True)
    V = cfg.vocab_size
    with torch.inference_mode():
        for B in [int(b) for b in a.batches.split(",") if b]:
            ids = torch.randint(0, V, (B, a.prompt), device="cuda")
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            nxt = torch.randint(0, V, (B, 1), device="cuda")
            times = []
            for i in range(a.steps + 3):
                ms, out = timed(lambda: model(input_ids=nxt, past_key_values=cache, use_cache=True))
                cache = out.past_key_values
                if i >= 3:
                    times.append(ms)
            print(json.dumps({"measure": "decode", "peer": "transformers", "batch": B,
                              "context": a.prompt + 3 + a.steps // 2, "steps": a.steps,
                              "median_ms": round(statistics.median(times), 4),
                              "min_ms": round(min(times), 4)}), flush=True)
            del cache, out
            torch.cuda.empty_cache()
        if a.prefill > 0:
            times = []
            for rep in range(4):
                ids = torch.randint(0, V, (1, a.prefill), device="cuda")
                ms, _ = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
                if rep > 0:
                    times.append(ms)
            print(json.dumps({"measure": "prefill", "peer": "transformers", "tokens": a.prefill,
                              "median_ms": round(statistics.median(times), 3)}), flush=True)


if __name__ == "__main__":
    main()
