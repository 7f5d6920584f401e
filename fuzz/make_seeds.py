#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from the repository's own fixtures and tests.

Run from the repository root: python3 fuzz/make_seeds.py. Deterministic: a rerun writes the same
files. Each seed is a small input in the target's input format (see the fuzz_<target>.cpp header
comment); seeds larger than MAX_SEED bytes are left out so that fuzzing stays fast.
The request_set seeds are request sets written by `plumb bench --save-requests` (content hashes
need plumb's own canonical JSON), kept as committed files and not rewritten here.
"""
import json
import os
import re
import struct
import sys

MAX_SEED = 8192
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX_SEED:
        return
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def decode_http_case(text):
    """tests/server/corpus/http/*.http: '#' comment lines, newlines are layout, escapes name bytes."""
    lines = [l for l in text.split("\n") if not l.startswith("#")]
    body = "".join(lines)
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in "rnt\\":
                out += {"r": b"\r", "n": b"\n", "t": b"\t", "\\": b"\\"}[n]
                i += 2
                continue
            if n == "x":
                out.append(int(body[i + 2:i + 4], 16))
                i += 4
                continue
        out += c.encode("utf-8")
        i += 1
    return bytes(out)


def http_seeds():
    d = os.path.join(ROOT, "tests/server/corpus/http")
    for name in sorted(os.listdir(d)):
        if name.endswith(".http"):
            write("http_request", name, decode_http_case(read(os.path.join(d, name)).decode("utf-8")))
    good = {
        "get_stream": b"GET /stream?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
        "post_echo_length": b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        "post_echo_chunked": b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        "post_echo_continue": b"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
        "http10_keepalive": b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /nothing HTTP/1.0\r\n\r\n",
        "head_then_get": b"HEAD /echo HTTP/1.1\r\nHost: a\r\n\r\nGET /stream HTTP/1.1\r\nHost: a\r\n\r\n",
        "pipelined_echo": b"POST /echo HTTP/1.1\r\nContent-Length: 1\r\n\r\naPOST /echo HTTP/1.1\r\n"
                          b"Content-Length: 1\r\nConnection: close\r\n\r\nb",
        "chunked_lf_only": b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
    }
    for k, v in good.items():
        write("http_request", k, v)
    chunked = {
        "two_chunks": b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        "empty_body": b"0\r\n\r\n",
        "upper_hex": b"A\r\n0123456789\r\n0\r\n\r\n",
        "extension": b"5;name=value\r\nhello\r\n0\r\n\r\n",
        "trailers": b"3\r\nabc\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n",
        "lf_only": b"5\nhello\n0\n\n",
        "size_too_big": b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n",
        "over_limit": b"1001\r\n" + b"x" * 4097 + b"\r\n0\r\n\r\n",
        "truncated": b"10\r\nshort",
    }
    for k, v in chunked.items():
        write("http_chunked", k, v)


def response_seeds():
    # Input: mode byte (1: HEAD request, 2: small head limit), cut byte, then the response.
    cases = {
        "length": (0, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}"),
        "chunked_sse": (0, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"e\r\ndata: {\"x\":1}\n\n\r\n10\r\ndata: [DONE]\n\n\r\n\r\n0\r\n\r\n"),
        "chunked_trailers": (0, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n"),
        "continue_then_ok": (0, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"),
        "until_close": (0, b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nthe rest until close"),
        "head": (1, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"),
        "keep_alive_10": (0, b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokEXTRA"),
        "error_json": (0, b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 33\r\n"
                          b"Connection: close\r\n\r\n{\"error\":{\"message\":\"bad\",\"x\":1}}"),
        "lf_only": (0, b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
        "small_head_limit": (2, b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * 200 + b"\r\n\r\n"),
        "conflicting_length": (0, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"),
    }
    for k, (mode, resp) in cases.items():
        write("response_parser", k, bytes([mode, len(resp) // 2 & 0xFF]) + resp)


def sse_seeds():
    # Input: mode byte (1: strict, 2: small limits), then the stream.
    chunk = json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "Hi",
                        "finish_reason": None}]}, separators=(",", ":"))
    cases = {
        "openai_stream": (1, "data: " + chunk + "\n\ndata: " + chunk + "\n\ndata: [DONE]\n\n"),
        "crlf": (1, "data: a\r\ndata: b\r\n\r\n: keep-alive\r\n\r\n"),
        "cr_only": (1, "data: a\rdata: b\r\r"),
        "fields": (1, "event: update\nid: 7\nretry: 1500\ndata: {\"x\":1}\n\n"),
        "bom_comment": (1, "\ufeff: comment\ndata:no space\n\n"),
        "lenient_unknown": (0, "foo: bar\nretry: x\ndata: ok\n\n"),
        "unterminated": (1, "data: cut"),
        "small_limits": (3, "data: " + "z" * 100 + "\n\n"),
        "multi_line_data": (1, "data: one\ndata:\ndata: three\n\n"),
    }
    for k, (mode, s) in cases.items():
        write("sse", k, bytes([mode]) + s.encode("utf-8"))


def openai_seeds():
    # Input: mode byte (1: chat, 2: the /tokenize context), then the body.
    for sub, mode in (("completions", 0), ("chat", 1)):
        d = os.path.join(ROOT, "tests/server/corpus", sub)
        for name in sorted(os.listdir(d)):
            if name.endswith(".json"):
                write("openai_request", sub + "_" + name, bytes([mode]) + read(os.path.join(d, name)))
    good = {
        "completion": (0, {"model": "plumb-tiny", "prompt": "Bea lives in", "max_tokens": 16, "temperature": 0.7,
                           "top_p": 0.9, "top_k": 40, "seed": 1, "stop": ["\n", "."], "logprobs": 2,
                           "echo": True, "stream": True, "stream_options": {"include_usage": True}}),
        "completion_ids": (0, {"prompt": [[1, 2, 3]], "max_tokens": 4, "ignore_eos": True}),
        "chat": (1, {"model": "plumb-tiny", "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "What is 3 + 4?"}], "max_completion_tokens": 8,
                     "logprobs": True, "top_logprobs": 3, "skip_special_tokens": False}),
        "chat_parts": (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                           "temperature": 0}),
        "tokenize_context": (3, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}),
    }
    for k, (mode, body) in good.items():
        write("openai_request", "valid_" + k, bytes([mode]) + json.dumps(body).encode("utf-8"))


def safetensors_image(tensors, metadata=None, pad=True):
    header = {}
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    cases = {
        "two_f32": [("a", "F32", [2, 2], f32), ("b", "F32", [4], f32)],
        "mixed": [("w", "BF16", [2, 3], b"\x80\x3f" * 6), ("h", "F16", [1], b"\x00\x3c"),
                  ("ids", "I64", [2], struct.pack("<2q", 1, 2)), ("n", "I32", [], struct.pack("<i", 7))],
        "empty_tensor": [("e", "F32", [0, 5], b""), ("x", "F32", [1], f32[:4])],
        "unsupported_dtype": [("d", "F64", [1], b"\x00" * 8)],
    }
    for k, t in cases.items():
        write("safetensors", k, safetensors_image(t, {"format": "pt"}))
    write("safetensors", "no_tensors", safetensors_image([], {"format": "pt"}))
    write("safetensors", "unpadded", safetensors_image(cases["two_f32"], None, pad=False))
    # The real header of a fixture model with its data cut off (the validator must refuse it).
    raw = read("tests/fixtures/models/llama3/model.safetensors")
    n = struct.unpack("<Q", raw[:8])[0]
    write("safetensors", "fixture_header_only", raw[:8 + n])


def config_seeds():
    paths = ["models/plumb-tiny/config.json"]
    for base in ("models/configs", "tests/fixtures/models"):
        for name in sorted(os.listdir(os.path.join(ROOT, base))):
            p = os.path.join(base, name, "config.json")
            if os.path.exists(os.path.join(ROOT, p)):
                paths.append(p)
    for p in paths:
        write("model_config", p.replace("/", "_"), read(p))


def shrink_tokenizer(tj, keep):
    """The fixture's tokenizer.json with its vocabulary cut to the first `keep` ids (and the merges
    that stay inside it): the same normalizer/pre-tokenizer/decoder/post-processor, a small input."""
    t = json.loads(tj)
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
    merges = []
    for m in t["model"].get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append(m)
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges[:64]
    t["added_tokens"] = [dict(a, id=keep + i) for i, a in enumerate(t["added_tokens"][:4])]
    return json.dumps(t, ensure_ascii=False, separators=(",", ":"))


def tokenizer_seeds():
    dirs = ["models/plumb-tiny", "tests/fixtures/tokenizers/bytelevel_bpe", "tests/fixtures/tokenizers/llama3_bpe",
            "tests/fixtures/tokenizers/sentencepiece_bpe"]
    for i, d in enumerate(dirs):
        tj = shrink_tokenizer(read(d + "/tokenizer.json").decode("utf-8"), 300)
        cfg = json.loads(read(d + "/tokenizer_config.json"))
        cfg.pop("chat_template", None)
        cfg.pop("added_tokens_decoder", None)
        gen = read(d + "/generation_config.json") if os.path.exists(os.path.join(ROOT, d, "generation_config.json")) else b""
        name = os.path.basename(d)
        write("tokenizer_json", name, tj.encode("utf-8") + b"\0" + json.dumps(cfg).encode("utf-8") + b"\0" + gen
              + b"\0" + "Hello wörld 123 <|im_end|>".encode("utf-8"))
        write("tokenizer_json", name + "_no_config", tj.encode("utf-8"))
    # Texts of the tokenizer cases, on each shipped tokenizer (mode byte: tokenizer, 0x10: special).
    cases = json.loads(read("tests/fixtures/tokenizers/llama3_bpe/cases.json"))
    items = cases["cases"] if isinstance(cases, dict) and "cases" in cases else cases
    texts = [c["text"] for c in items if isinstance(c, dict) and "text" in c]
    for i, text in enumerate(texts):
        write("tokenizer_encode", "case_%02d" % i, bytes([(i % 3) | (0x10 if i % 2 else 0)]) + text.encode("utf-8"))


def chat_seeds():
    # Input: mode byte (family 0-4 or 5 = detect; 0x40: thinking off), template \x1f bos \x1f eos, then
    # role \x1f content pairs.
    dirs = ["models/plumb-tiny", "tests/fixtures/tokenizers/bytelevel_bpe", "tests/fixtures/tokenizers/llama3_bpe",
            "tests/fixtures/tokenizers/sentencepiece_bpe"]
    convo = ["system", "You are terse.", "user", "Hi!", "assistant", "Hello.", "user", "What is 3 + 4?"]
    for d in dirs:
        cfg = json.loads(read(d + "/tokenizer_config.json"))
        tmpl = cfg.get("chat_template") or ""
        if isinstance(tmpl, list):
            tmpl = tmpl[0]["template"]
        for mode in (5, 5 | 0x40):
            fields = [tmpl, "<s>", "</s>"] + convo
            write("chat_template", "%s_%d" % (os.path.basename(d), mode),
                  bytes([mode]) + "\x1f".join(fields).encode("utf-8"))
    markers = {0: "<|start_header_id|>", 1: "<|im_start|>", 2: "[INST] <<SYS>>", 3: "[INST]", 4: "<|user|>"}
    for fam, m in markers.items():
        fields = [m, "<s>", "</s>", "user", "a", "assistant", "b", "user", "c"]
        write("chat_template", "family_%d" % fam, bytes([fam]) + "\x1f".join(fields).encode("utf-8"))
    write("chat_template", "qwen3_like", bytes([5]) + "\x1f".join(
        ["<|im_start|>{% if enable_thinking %}<think>", "", "<|im_end|>", "user", "q", "assistant",
         "<think>x</think>a", "user", "q2"]).encode("utf-8"))


def dataset_seeds():
    # Input: mode byte (format 0 generic, 1 longbench, 2 sharegpt; 4: default max_tokens; 8:
    # default temperature; 16: limit 3; 32: word counter), then the file.
    prompts = read("data/prompts.jsonl").decode("utf-8").splitlines()[:8]
    write("dataset", "generic_prompts", bytes([0]) + ("\n".join(prompts) + "\n").encode("utf-8"))
    ib = [{"messages": [{"role": "user", "content": "Summarize: the cat sat."}], "max_new_tokens": 32,
           "max_tokens": 32, "temperature": 0.2, "ignore_eos": True, "content_hash": "0" * 64},
          {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "max_new_tokens": 8,
           "temperature": 0.7, "ignore_eos": False}]
    write("dataset", "inferencebench_style", bytes([4 | 8]) + "\n".join(json.dumps(x) for x in ib).encode("utf-8"))
    lb = {"_id": "x", "domain": "d", "context": "A long document.", "question": "Which?", "choice_A": "a",
          "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "A"}
    write("dataset", "longbench", bytes([1 | 4]) + json.dumps(lb).encode("utf-8"))
    sg = {"id": "1", "conversations": [{"from": "human", "value": "Hello there"}, {"from": "gpt", "value": "Hi, how are you"},
                                         {"from": "human", "value": "Fine"}]}
    write("dataset", "sharegpt_jsonl", bytes([2 | 32]) + json.dumps(sg).encode("utf-8"))
    write("dataset", "sharegpt_array", bytes([2 | 4 | 16]) + json.dumps([sg, sg, {"conversations": []}]).encode("utf-8"))


def space_seeds():
    for p in ["src/tune/spaces/plumb.toml", "src/tune/spaces/vllm.toml", "src/tune/spaces/sglang.toml",
              "src/tune/spaces/llamacpp.toml", "examples/tune/efficiency_space.toml",
              "examples/tune/efficiency_space_12.toml"]:
        write("search_space", os.path.basename(os.path.dirname(p)) + "_" + os.path.basename(p), read(p))


def main():
    os.chdir(ROOT)
    for t in ["http_request", "http_chunked", "response_parser", "sse", "openai_request", "safetensors",
              "model_config", "tokenizer_json", "tokenizer_encode", "chat_template", "dataset", "search_space"]:
        d = os.path.join(OUT, t)
        if os.path.isdir(d):
            for f in os.listdir(d):
                os.remove(os.path.join(d, f))
    http_seeds()
    response_seeds()
    sse_seeds()
    openai_seeds()
    safetensors_seeds()
    config_seeds()
    tokenizer_seeds()
    chat_seeds()
    dataset_seeds()
    space_seeds()
    for t in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, t))
        print("%-18s %3d seeds, %6d bytes" % (t, len(files), sum(os.path.getsize(os.path.join(OUT, t, f)) for f in files)))


if __name__ == "__main__":
    sys.exit(main())
