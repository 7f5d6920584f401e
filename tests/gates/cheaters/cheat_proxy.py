#!/usr/bin/env python3
"""A cheating OpenAI-compatible proxy in front of a real server: a test fixture for `plumb gate`.

Never a mode of `plumb serve`. Usage:
  cheat_proxy.py --upstream http://127.0.0.1:PORT --mode MODE [--port 0]
Prints "PORT <n>" on stdout once listening. Modes (each is meant to be caught by one check):
  honest    forward unchanged (the proxy itself must not trip the gate)
  canned    every completion answers the same fixed text and logprobs, whatever the prompt
  cache     a response cache keyed on the prompt (ignores seed and temperature)
  inflate   usage.completion_tokens and usage.prompt_tokens reported x2
  stopearly ignore_eos ignored: the request is forwarded without ignore_eos and with half of
            max_tokens, as an engine that stops at a premature end of sequence
  truncate  the text is cut to its first quarter, usage unchanged
Standard library only.
"""
import argparse
import http.server
import json
import socketserver
import sys
import urllib.error
import urllib.request

ARGS = None
CACHE = {}
CANNED = None


def forward(method, path, body):
    req = urllib.request.Request(ARGS.upstream + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, data):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        status, data = forward("GET", self.path, None)
        self.reply(status, data)

    def do_POST(self):
        global CANNED
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        completion = self.path in ("/v1/completions", "/v1/chat/completions")
        if not completion or ARGS.mode == "honest":
            return self.reply(*forward("POST", self.path, body))
        req = json.loads(body)
        mode = ARGS.mode
        if mode == "canned":
            if CANNED is None:
                status, data = forward("POST", self.path, body)
                if status != 200:
                    return self.reply(status, data)
                CANNED = data
            return self.reply(200, CANNED)
        if mode == "cache":
            key = self.path + json.dumps(req.get("prompt", req.get("messages")), sort_keys=True) + \
                json.dumps([req.get("echo"), req.get("logprobs"), req.get("max_tokens")])
            if key not in CACHE:
                CACHE[key] = forward("POST", self.path, body)
            return self.reply(*CACHE[key])
        if mode == "stopearly" and req.get("ignore_eos"):
            req.pop("ignore_eos")
            req["max_tokens"] = max(1, int(req.get("max_tokens", 16)) // 2)
            return self.reply(*forward("POST", self.path, json.dumps(req).encode()))
        status, data = forward("POST", self.path, body)
        if status != 200:
            return self.reply(status, data)
        out = json.loads(data)
        if mode == "inflate" and "usage" in out:
            u = out["usage"]
            u["completion_tokens"] = 2 * u.get("completion_tokens", 0)
            u["prompt_tokens"] = 2 * u.get("prompt_tokens", 0)
            u["total_tokens"] = u["completion_tokens"] + u["prompt_tokens"]
        if mode == "truncate" and not req.get("echo"):
            for c in out.get("choices", []):
                if isinstance(c.get("text"), str):
                    c["text"] = c["text"][: len(c["text"]) // 4]
                elif isinstance(c.get("message"), dict) and isinstance(c["message"].get("content"), str):
                    c["message"]["content"] = c["message"]["content"][: len(c["message"]["content"]) // 4]
        return self.reply(200, json.dumps(out).encode())


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--mode", required=True,
                   choices=["honest", "canned", "cache", "inflate", "stopearly", "truncate"])
    p.add_argument("--port", type=int, default=0)
    ARGS = p.parse_args()
    ARGS.upstream = ARGS.upstream.rstrip("/")
    srv = Server(("127.0.0.1", ARGS.port), Handler)
    print("PORT", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
