#!/usr/bin/env python3
"""Trains plumb-tiny: a small Llama-architecture model on the synthetic corpus of make_corpus.py.

  PYTHONUNBUFFERED=1 python3 tools/train/train.py --work /tmp/pt --model-dir OUTDIR/plumb-tiny \
      --train-seconds 300 [--ckpt OUTDIR/ckpt.safetensors]

Steps: generate the corpus (seeded), train a byte-level BPE tokenizer on it, pack documents into
512-token rows, train with AdamW + cosine schedule under bf16 autocast on the GPU for a fixed time
budget (the step count is sized from the measured step time), save the HF folder in bf16, then
evaluate the SAVED folder on the held-out multiple-choice set and write reference logits
(fixture format) and the model card. Needs torch, transformers, tokenizers, safetensors, numpy.
"""

import argparse
import json
import math
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))

import fixture_common  # noqa: E402
import make_corpus  # noqa: E402

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2-Instruct's ChatML template (default system prompt "You are a helpful assistant.").
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MODEL = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    initializer_range=0.02,
    hidden_act="silu",
)
VOCAB = 4096
SEQ = 512


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_docs(corpus_dir):
    docs = []
    for fn in sorted(os.listdir(corpus_dir)):
        with open(os.path.join(corpus_dir, fn)) as f:
            docs.extend(json.loads(line)["text"] for line in f)
    return docs


def train_tokenizer(docs):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    strip = re.compile("|".join(re.escape(s) for s in SPECIALS))
    # The special strings are whole tokens at run time, so they must not shape the merges.
    tok.train_from_iterator((strip.sub("\n", d) for d in docs[: len(docs) // 4]), trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    assert tok.get_vocab_size(with_added_tokens=True) <= VOCAB, tok.get_vocab_size(with_added_tokens=True)
    return tok


def pack_rows(tok, docs, eot):
    """Document-aligned rows of SEQ+1 ids; each row starts at a document start. Returns (ids, mask)."""
    import numpy as np

    enc = tok.encode_batch(docs, add_special_tokens=False)
    lens = np.fromiter((len(e.ids) + 1 for e in enc), dtype=np.int64, count=len(enc))
    flat = np.empty(int(lens.sum()), dtype=np.int32)
    pos = 0
    for e in enc:
        n = len(e.ids)
        flat[pos : pos + n] = e.ids
        flat[pos + n] = eot
        pos += n + 1
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    ends = starts + lens
    rows, masks = [], []
    i, n_docs, L = 0, len(docs), SEQ + 1
    while i < n_docs:
        s = starts[i]
        j = int(np.searchsorted(ends, s + L, side="right")) - 1  # last doc that ends within the row
        if j < i:  # a document longer than a row: truncate it
            j = i
            e = s + L
        else:
            e = ends[j]
        row = np.full(L, eot, dtype=np.int32)
        m = np.zeros(L, dtype=np.bool_)
        row[: e - s] = flat[s:e]
        m[: e - s] = True
        rows.append(row)
        masks.append(m)
        i = j + 1
    return np.stack(rows), np.stack(masks), int(lens.sum())


def mc_prompts(tok, heldout, fmt):
    out = []
    for r in heldout:
        if fmt == "completion":
            text = make_corpus.render_completion(r["question"], r["options"])
        else:
            text = make_corpus.render_chat_prompt(r["question"], r["options"])
        out.append(tok.encode(text, add_special_tokens=False).ids)
    return out


def extract_letter(text, n_options):
    """Answer extraction (documented in data/README.md): '(X)' after 'answer is', else the first
    standalone option letter."""
    letters = make_corpus.LETTERS[:n_options]
    m = re.search(r"answer is \(?([A-J])\)?", text)
    if m and m.group(1) in letters:
        return m.group(1)
    m = re.search(r"\b([A-J])\b", text)
    if m and m.group(1) in letters:
        return m.group(1)
    return None


def eval_next_token(model, tok, heldout, autocast=True, batch=100):
    """Completion format: greedy next token after 'Answer:'; letter parsed from its text.
    autocast: bf16 autocast on CUDA (training-time view); False computes in the weights' dtype."""
    import torch

    device = next(model.parameters()).device

    prompts = mc_prompts(tok, heldout, "completion")
    letter_ids = [tok.token_to_id(f"Ġ{c}") for c in "ABCD"]
    correct = correct_restricted = 0
    per_cat = {}
    model.eval()
    with torch.no_grad():
        for b0 in range(0, len(prompts), batch):
            chunk = prompts[b0 : b0 + batch]
            L = max(len(p) for p in chunk)
            ids = torch.zeros(len(chunk), L, dtype=torch.long)
            for k, p in enumerate(chunk):
                ids[k, : len(p)] = torch.tensor(p)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(autocast and device.type == "cuda")):
                logits = model(input_ids=ids.to(device), use_cache=False).logits.float()
            for k, p in enumerate(chunk):
                r = heldout[b0 + k]
                row = logits[k, len(p) - 1]
                got = extract_letter(tok.decode([int(row.argmax())]), len(r["options"]))
                ok = got == r["answer"]
                correct += ok
                if None not in letter_ids:
                    correct_restricted += "ABCD"[int(row[letter_ids].argmax())] == r["answer"]
                c = per_cat.setdefault(r["category"], [0, 0])
                c[0] += ok
                c[1] += 1
    model.train()
    n = len(heldout)
    return {
        "accuracy": correct / n,
        "accuracy_letters_only": correct_restricted / n,
        "per_category": {k: v[0] / v[1] for k, v in sorted(per_cat.items())},
    }


def eval_chat(model, tok, heldout, max_new=12):
    """Chat format: greedy generation after the ChatML generation prompt; letter extracted."""
    import torch

    device = next(model.parameters()).device

    prompts = mc_prompts(tok, heldout, "chat")
    eot = tok.token_to_id("<|endoftext|>")
    im_end = tok.token_to_id("<|im_end|>")
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), eot, dtype=torch.long)
    att = torch.zeros((len(prompts), L), dtype=torch.long)
    for k, p in enumerate(prompts):  # left padding
        ids[k, L - len(p) :] = torch.tensor(p)
        att[k, L - len(p) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=att.to(device),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=eot,
            eos_token_id=[im_end, eot],
        )
    correct = 0
    samples = []
    per_cat = {}
    for k, r in enumerate(heldout):
        gen = [t for t in out[k, L:].tolist() if t not in (eot,)]
        text = tok.decode(gen, skip_special_tokens=True)
        got = extract_letter(text, len(r["options"]))
        ok = got == r["answer"]
        correct += ok
        c = per_cat.setdefault(r["category"], [0, 0])
        c[0] += ok
        c[1] += 1
        if k < 3:
            samples.append({"answer": r["answer"], "generated": text})
    return {
        "accuracy": correct / len(heldout),
        "per_category": {k: v[0] / v[1] for k, v in sorted(per_cat.items())},
        "samples": samples,
    }


def sample_generations(model, tok, device, prompts):
    import torch

    out = []
    for p in prompts:
        ids = torch.tensor([tok.encode(p, add_special_tokens=False).ids], device=device)
        with torch.no_grad():
            g = model.generate(input_ids=ids, max_new_tokens=40, do_sample=False, pad_token_id=tok.token_to_id("<|endoftext|>"))
        out.append({"prompt": p, "completion": tok.decode(g[0, ids.shape[1] :].tolist(), skip_special_tokens=False)})
    return out


def save_ckpt(model, path):
    from safetensors.torch import save_file

    sd = {k: v.detach().to("cpu").bfloat16().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, path)


def write_tokenizer_files(tok, model_dir, eot, im_end):
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    added = {
        str(i): {"content": a.content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        for i, a in sorted(tok.get_added_tokens_decoder().items())
    }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": SEQ,
        "chat_template": CHATML_TEMPLATE,
    }
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True, help="scratch directory (corpus)")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--docs", type=int, default=160000)
    ap.add_argument("--train-seconds", type=float, default=300)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--ckpt", help="bf16 checkpoint written at every evaluation")
    ap.add_argument("--metrics", help="JSON with every figure")
    args = ap.parse_args()

    t_start = time.time()
    corpus_dir = os.path.join(args.work, "corpus")
    if not os.path.exists(corpus_dir):
        # A separate process, before torch is imported: its worker pool forks.
        import subprocess

        cmd = [sys.executable, os.path.join(HERE, "make_corpus.py"), "--corpus", corpus_dir, "--docs", str(args.docs)]
        subprocess.run(cmd, check=True)

    import numpy as np
    import torch
    import transformers

    seed = make_corpus.derive_seed("train") % (2**31)
    torch.manual_seed(seed)
    np.random.seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    versions = fixture_common.versions()
    log(f"versions {versions}, device {device}")

    docs = read_docs(corpus_dir)
    _, _, heldout = make_corpus.build()
    log(f"corpus: {len(docs)} docs, {sum(map(len, docs)) / 1e6:.1f} MB")

    tok = train_tokenizer(docs)
    eot, im_start, im_end = (tok.token_to_id(s) for s in SPECIALS)
    log(f"tokenizer: {tok.get_vocab_size(with_added_tokens=True)} ids; specials {eot},{im_start},{im_end}")
    rows, masks, n_tokens = pack_rows(tok, docs, eot)
    log(f"packed: {rows.shape[0]} rows of {SEQ + 1}, {n_tokens / 1e6:.1f}M tokens, fill {masks.mean():.3f}")
    rows_t = torch.from_numpy(rows.astype(np.int64)).to(device)
    masks_t = torch.from_numpy(masks).to(device)

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        bos_token_id=eot,
        eos_token_id=im_end,
        pad_token_id=eot,
        **MODEL,
        **fixture_common.rope_kwargs(transformers.LlamaConfig, 10000.0, None),
    )
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        fused=(device == "cuda"),
    )
    warmup = 150
    planned = 10**9  # sized after the first timed steps
    gen = torch.Generator(device=device).manual_seed(seed)
    n_rows = rows_t.shape[0]
    perm = torch.randperm(n_rows, generator=gen, device=device)
    cursor = 0
    step = 0
    losses = []
    history = []
    t_train = time.time()
    t_timing = None
    last_eval = time.time()
    model.train()
    while True:
        if step == 10:
            torch.cuda.synchronize() if device == "cuda" else None
            t_timing = time.time()
        if step == 40:
            torch.cuda.synchronize() if device == "cuda" else None
            step_s = (time.time() - t_timing) / 30
            left = args.train_seconds - (time.time() - t_train)
            planned = 40 + int(left / (step_s * 1.04))  # evals take a few percent
            log(f"step time {step_s * 1000:.1f} ms -> {planned} steps planned")
        elapsed = time.time() - t_train
        if step >= planned or elapsed > args.train_seconds * 1.08:
            break
        lr = args.lr * min(1.0, (step + 1) / warmup)
        if step >= warmup and planned < 10**9:
            frac = min(1.0, (step - warmup) / max(1, planned - warmup))
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        if cursor + args.batch > n_rows:
            perm = torch.randperm(n_rows, generator=gen, device=device)
            cursor = 0
        idx = perm[cursor : cursor + args.batch]
        cursor += args.batch
        batch = rows_t[idx]
        m = masks_t[idx]
        x = batch[:, :-1]
        y = batch[:, 1:].masked_fill(~m[:, 1:], -100)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=(device == "cuda")):
            logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            losses.append((step, float(loss)))
        if step % 200 == 0:
            log(f"step {step} loss {float(loss):.4f} lr {lr:.2e} elapsed {time.time() - t_train:.0f}s")
        if time.time() - last_eval > 60:
            ev = eval_next_token(model, tok, heldout)
            history.append({"step": step, "loss": float(loss), "heldout_accuracy": ev["accuracy"]})
            log(f"eval step {step}: held-out MC accuracy {ev['accuracy']:.3f} {ev['per_category']}")
            if args.ckpt:
                save_ckpt(model, args.ckpt)
            last_eval = time.time()
    train_s = time.time() - t_train
    final_loss = float(np.mean([l for _, l in losses[-10:]])) if losses else float("nan")
    log(f"trained {step} steps in {train_s:.0f}s, final loss (mean of last 10 logged) {final_loss:.4f}")

    # ---- save the HF folder in bf16 ----
    os.makedirs(args.model_dir, exist_ok=True)
    model = model.to(torch.bfloat16).eval()
    model.config.dtype = torch.bfloat16
    fixture_common.save_model(model, args.model_dir)
    fixture_common.legacy_config(os.path.join(args.model_dir, "config.json"))
    write_tokenizer_files(tok, args.model_dir, eot, im_end)
    transformers.GenerationConfig(bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot).save_pretrained(args.model_dir)
    if args.ckpt and os.path.exists(args.ckpt):
        os.remove(args.ckpt)  # the folder supersedes it
    log(f"saved {sorted(os.listdir(args.model_dir))}")

    # ---- evaluate the saved folder (each part guarded: the folder is already saved) ----
    errors = {}

    def guarded(name, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - recorded in the metrics, the rest still runs
            import traceback

            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"
            return None

    saved = fixture_common.load_model(args.model_dir, "bfloat16").to(device)
    ev_c = guarded("completion_bf16", lambda: eval_next_token(saved, tok, heldout, autocast=False))
    ev_chat = guarded("chat_bf16", lambda: eval_chat(saved, tok, heldout))
    saved32 = fixture_common.load_model(args.model_dir, "float32").to(device)
    ev_c32 = guarded("completion_f32", lambda: eval_next_token(saved32, tok, heldout, autocast=False))
    log(f"held-out MC of the saved folder: completion bf16 {ev_c}, chat bf16 {ev_chat}, completion f32 {ev_c32}")
    samples = guarded(
        "samples",
        lambda: sample_generations(
            saved,
            tok,
            device,
            [
                f"{heldout[0]['question']}",
                "Ada lives in",
                "What is 12 + 7? The answer is",
                "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a short story.<|im_end|>\n<|im_start|>assistant\n",
            ],
        ),
    )
    for s in samples or []:
        log(f"sample: {s['prompt']!r} -> {s['completion']!r}")

    # ---- reference logits (fixture format), from the saved folder on the CPU ----
    first = heldout[0]
    ids = tok.encode(make_corpus.render_completion(first["question"], first["options"]), add_special_tokens=False).ids[:24]
    ref_stats = guarded("reference", lambda: fixture_common.write_reference(args.model_dir, torch.tensor(ids, dtype=torch.int64)))
    log(f"reference: {ref_stats}")

    metrics = {
        "parameters": n_params,
        "config": MODEL | {"vocab_size": VOCAB, "context": SEQ},
        "steps": step,
        "batch_rows": args.batch,
        "tokens_per_step": args.batch * SEQ,
        "tokens_seen": step * args.batch * SEQ,
        "corpus_docs": len(docs),
        "corpus_tokens": n_tokens,
        "train_seconds": round(train_s, 1),
        "final_loss": final_loss,
        "loss_curve": losses,
        "eval_history": history,
        "heldout_items": len(heldout),
        "chance": 0.25,
        "heldout_completion_bf16": ev_c,
        "heldout_completion_f32": ev_c32,
        "heldout_chat_bf16": ev_chat,
        "samples": samples,
        "reference_stats": ref_stats,
        "errors": errors,
        "seed": seed,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "total_seconds": round(time.time() - t_start, 1),
        **versions,
    }
    with open(os.path.join(args.model_dir, "training_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    if args.metrics:
        with open(args.metrics, "w") as f:
            json.dump(metrics, f, indent=1)
    log("done")


if __name__ == "__main__":
    main()
