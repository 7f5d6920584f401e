#!/usr/bin/env python3
"""The client side of scripts/soak.sh: N concurrent streams against a running `plumb serve`, with
random disconnects and malformed requests mixed in, for a bounded time. Standard library only.

Each of --streams workers loops until the deadline, one request per connection:
  - stream (75%): a streamed chat or completions request, read to the end (data: [DONE]);
  - disconnect (15%): the same, then the client vanishes after a random number of bytes or a random
    delay, half the time with a reset (RST) instead of a FIN;
  - malformed (10%): a bad body or bad framing (see MALFORMED), sent and half-closed, then read to
    the end.
Counts outcomes by HTTP status, samples the server's RSS (/proc/PID/status) and, after the load
stops and the server has drained, reads /metrics and /health. Prints one JSON object.
"""
import argparse
import asyncio
import json
import os
import random
import socket
import struct
import time

WORDS = "the a cat dog city river blue red seven twelve walks lives in near over with and of".split()


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def body_for(rng, stream=True):
    n = rng.randint(2, 40)
    text = " ".join(rng.choice(WORDS) for _ in range(n))
    max_tokens = rng.randint(1, 48)
    if rng.random() < 0.5:
        path = "/v1/chat/completions"
        b = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
             "temperature": rng.choice([0, 0.7, 1.0]), "stream": stream}
        if rng.random() < 0.3:
            b["stream_options"] = {"include_usage": True}
    else:
        path = "/v1/completions"
        b = {"prompt": text, "max_tokens": max_tokens, "temperature": rng.choice([0, 0.7]), "stream": stream,
             "ignore_eos": rng.random() < 0.5}
    return path, json.dumps(b).encode()


def http_request(path, body, extra=b""):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n" + extra + b"\r\n" + body)


def malformed(rng):
    """One malformed request: (name, bytes)."""
    path, body = body_for(rng)
    choices = [
        ("bad_json", http_request(path, body[:-3] + b"}}}")),
        ("truncated_json", http_request(path, body[: rng.randint(0, len(body))])),
        ("wrong_types", http_request(path, json.dumps({"prompt": 7, "messages": "x", "max_tokens": "9",
                                                       "temperature": "hot", "stream": 1}).encode())),
        ("huge_numbers", http_request("/v1/completions", json.dumps(
            {"prompt": "x", "max_tokens": 2 ** 63 - 1, "temperature": 1e308, "top_p": -1}).encode())),
        ("bad_utf8", http_request("/v1/completions", b'{"prompt": "\xff\xfe\xc3", "max_tokens": 4}')),
        ("deep_nesting", http_request("/v1/completions", b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}")),
        ("content_length_lies", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n" + body),
        ("content_length_garbage", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1x\r\n\r\n{}"),
        ("chunked_garbage", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"),
        ("chunked_lf_only", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                            + ("%x" % len(body)).encode() + b"\n" + body + b"\n0\n\n"),
        ("bad_request_line", b"P\x00ST /v1/ HTTP/9.9\r\n\r\n"),
        ("binary_noise", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 512)))),
        ("header_flood", b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 3000 + b"\r\n"),
        ("unknown_path", b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"),
        ("unknown_model", http_request(path, json.dumps({"model": "other", "prompt": "x", "max_tokens": 2}).encode())),
        ("pipelined_mix", http_request(path, body).replace(b"Connection: close", b"Connection: keep-alive")
         + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"),
    ]
    return rng.choice(choices)


class Stats:
    def __init__(self):
        self.by_kind = {}
        self.statuses = {}
        self.five_xx = 0
        self.five_xx_examples = []
        self.completed_streams = 0
        self.truncated_streams = 0
        self.errors = {}

    def count(self, d, k):
        d[k] = d.get(k, 0) + 1


def parse_status(data):
    if data.startswith(b"HTTP/1.") and len(data) >= 12:
        try:
            return int(data[9:12])
        except ValueError:
            return None
    return None


async def read_all(reader, limit_s):
    chunks = []
    try:
        while True:
            d = await asyncio.wait_for(reader.read(65536), timeout=limit_s)
            if not d:
                break
            chunks.append(d)
    except (asyncio.TimeoutError, ConnectionError, OSError):
        return b"".join(chunks), False
    return b"".join(chunks), True


async def one(port, rng, stats, kind):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=30)
    except (asyncio.TimeoutError, OSError) as e:
        stats.count(stats.errors, "connect: " + type(e).__name__)
        return
    try:
        if kind == "malformed":
            name, data = malformed(rng)
            stats.count(stats.by_kind, "malformed:" + name)
            writer.write(data)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            out, _ = await read_all(reader, 120)
            # Every response on the connection, not only the first (pipelined requests).
            for part in out.split(b"HTTP/1.1 ")[1:]:
                s = parse_status(b"HTTP/1.1 " + part[:3])
                if s is not None:
                    stats.count(stats.statuses, s)
                    if s >= 500:
                        stats.five_xx += 1
                        if len(stats.five_xx_examples) < 5:
                            stats.five_xx_examples.append(name + ": " + part[:200].decode("latin-1"))
            return
        path, body = body_for(rng)
        writer.write(http_request(path, body))
        await writer.drain()
        if kind == "disconnect":
            stats.count(stats.by_kind, "disconnect")
            if rng.random() < 0.5:
                await asyncio.sleep(rng.random() * 2.0)
            else:
                try:
                    await asyncio.wait_for(reader.read(rng.randint(1, 600)), timeout=60)
                except (asyncio.TimeoutError, ConnectionError, OSError):
                    pass
            if rng.random() < 0.5:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()
            return
        stats.count(stats.by_kind, "stream")
        out, closed = await read_all(reader, 300)
        s = parse_status(out)
        stats.count(stats.statuses, s)
        if s is not None and s >= 500:
            stats.five_xx += 1
            if len(stats.five_xx_examples) < 5:
                stats.five_xx_examples.append("stream: " + out[:200].decode("latin-1"))
        if s == 200:
            if b"data: [DONE]" in out:
                stats.completed_streams += 1
            else:
                stats.truncated_streams += 1
    except (ConnectionError, OSError) as e:
        stats.count(stats.errors, kind + ": " + type(e).__name__)
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - closing a broken socket
            pass


async def worker(i, args, stats, deadline):
    rng = random.Random(args.seed * 100003 + i)
    await asyncio.sleep(rng.random() * 2.0)  # spread the first connects
    while time.monotonic() < deadline:
        r = rng.random()
        kind = "stream" if r < 0.75 else "disconnect" if r < 0.90 else "malformed"
        await one(args.port, rng, stats, kind)


async def get(port, path):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=10)
    writer.write(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
    await writer.drain()
    out, _ = await read_all(reader, 30)
    writer.close()
    return parse_status(out), out.split(b"\r\n\r\n", 1)[-1].decode("utf-8", "replace")


def metric(text, name):
    for line in text.splitlines():
        if line.startswith("plumb:" + name + "{") or line.startswith("plumb:" + name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def main_async(args):
    stats = Stats()
    start = time.monotonic()
    deadline = start + args.duration
    rss = []  # (seconds since start, kB)
    warm_rss = None

    async def sampler():
        nonlocal warm_rss
        while time.monotonic() < deadline:
            kb = rss_kb(args.server_pid)
            t = time.monotonic() - start
            rss.append((round(t, 1), kb))
            if warm_rss is None and t >= args.warmup:
                warm_rss = kb
            await asyncio.sleep(5)

    tasks = [asyncio.create_task(worker(i, args, stats, deadline)) for i in range(args.streams)]
    samp = asyncio.create_task(sampler())
    # Bounded: workers still inside a request at the deadline get a grace period, then are cancelled.
    done, pending = await asyncio.wait(tasks, timeout=args.duration + 330)
    for t in pending:
        t.cancel()
    await samp
    load_end = time.monotonic() - start
    # Let the server finish what is running, then read its state.
    running = waiting = kv_used = None
    for _ in range(60):
        try:
            st, text = await get(args.port, "/metrics")
        except (OSError, asyncio.TimeoutError):
            text = ""
        running, waiting = metric(text, "num_requests_running"), metric(text, "num_requests_waiting")
        kv_used = metric(text, "kv_cache_blocks_used")
        if running == 0 and waiting == 0 and kv_used == 0:
            break
        await asyncio.sleep(1)
    try:
        health, _ = await get(args.port, "/health")
    except (OSError, asyncio.TimeoutError):
        health = None
    end_rss = rss_kb(args.server_pid)
    if warm_rss is None and rss:
        warm_rss = rss[len(rss) // 2][1]
    requests = sum(v for k, v in stats.by_kind.items())
    return {
        "duration_s": round(load_end, 1),
        "streams": args.streams,
        "requests": requests,
        "by_kind": {k: stats.by_kind[k] for k in sorted(stats.by_kind)},
        "statuses": {str(k): v for k, v in sorted(stats.statuses.items(), key=lambda kv: str(kv[0]))},
        "completed_streams": stats.completed_streams,
        "truncated_streams": stats.truncated_streams,
        "client_errors": stats.errors,
        "five_xx": stats.five_xx,
        "five_xx_examples": stats.five_xx_examples,
        "workers_cancelled_at_deadline": len(pending),
        "server_alive": rss_kb(args.server_pid) is not None,
        "health_status": health,
        "running_at_end": running,
        "waiting_at_end": waiting,
        "kv_blocks_used_at_end": kv_used,
        "rss_kb_after_warmup": warm_rss,
        "rss_kb_at_end": end_rss,
        "rss_ratio": round(end_rss / warm_rss, 3) if end_rss and warm_rss else None,
        "rss_samples": rss,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
