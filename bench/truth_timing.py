#!/usr/bin/env python3
"""Joins plumb bench's per-request CSV with the truth server's stamps and prints the timing error
(docs/metrics.md, "Timing error against an independent server").

Usage: truth_timing.py LABEL BENCH_CSV STAMPS_JSONL [--json OUT]

Per request (joined on the X-Request-Id plumb sends, "m<index>-<hash16>", checked against the CSV's
hash), error = plumb's figure - the server's figure, in ms:
  TTFT  plumb first_token - sent        vs  server chunks[0] - arrive_last (kernel receive time of
                                            the request's last byte; recv_last where not reported)
  TPOT  plumb (end - first_token)/(n-1) vs  server (done - chunks[0])/(n-1)
  ITL   plumb gap between token chunks  vs  server gap between their writes (every gap of every request)
  ttft_first / ttft_later  TTFT error of the first request on its connection / of later ones
  (connect) plumb's connect_ms: TCP set-up a request waited for inside its TTFT (none when plumb
           opened the connections before the measured phase, as it does under a concurrency cap)
  (server) how late the server wrote its chunks against its own plan: a server that keeps its
           schedule is not the bottleneck
Prints one line per metric: count, median |error|, p99 |error|, max |error|, median signed error;
for TTFT also split into the first request on each connection and later ones.
"""
import csv
import json
import math
import sys

NS = 1e6  # ns per ms


def pct(xs, p):
    """Hyndman-Fan type 7 (NumPy's default), as docs/metrics.md defines percentiles."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    h = (len(s) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def load(csv_path, stamps_path):
    rows = {}
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            rows[int(r["index"])] = r
    stamps = {}
    with open(stamps_path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            s = json.loads(line)
            if s["id"].startswith("m"):
                stamps[s["id"]] = s
    joined = []
    for idx, r in sorted(rows.items()):
        key = "m%d-%s" % (idx, r["hash"][:16])
        s = stamps.get(key)
        if s is None or r["status"] != "ok":
            continue
        joined.append((r, s))
    return rows, stamps, joined


def errors(joined):
    e = {"ttft": [], "ttft_first": [], "ttft_later": [], "tpot": [], "itl": [], "connect": [], "server_ttft": [], "late": []}
    for r, s in joined:
        n = int(r["usage_output_tokens"]) if int(r["usage_output_tokens"]) >= 0 else int(r["local_output_tokens"])
        ch = s["chunks"]
        srv_ttft = (ch[0] - (s["arrive_last"] or s["recv_last"])) / NS
        t = s["recv_last"]
        for k in range(len(ch)):
            t += s["plan_ns"][k]
            e["late"].append((ch[k] - t) / NS)
        err = float(r["ttft_ms"]) - srv_ttft
        e["ttft"].append(err)
        e["server_ttft"].append(srv_ttft)
        (e["ttft_first"] if s["conn_req"] == 0 else e["ttft_later"]).append(err)
        if r.get("connect_ms"):
            e["connect"].append(float(r["connect_ms"]))
        if n >= 2 and r["tpot_ms"]:
            e["tpot"].append(float(r["tpot_ms"]) - (s["done"] - ch[0]) / NS / (n - 1))
        cli = [float(x) for x in r["token_chunk_ms"].split()]
        if len(cli) == len(ch):
            for k in range(1, len(ch)):
                e["itl"].append((cli[k] - cli[k - 1]) - (ch[k] - ch[k - 1]) / NS)
    return e


def main():
    label, csv_path, stamps_path = sys.argv[1:4]
    out_json = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--json" else None
    rows, stamps, joined = load(csv_path, stamps_path)
    e = errors(joined)
    result = {"label": label, "requests": len(rows), "joined": len(joined), "metrics": {}}
    for name in ("ttft", "ttft_first", "ttft_later", "tpot", "itl"):
        xs = e[name]
        a = [abs(x) for x in xs]
        m = {"n": len(xs), "median_abs_ms": pct(a, 50), "p99_abs_ms": pct(a, 99),
             "max_abs_ms": max(a) if a else float("nan"), "median_ms": pct(xs, 50)}
        result["metrics"][name] = m
        print("%-12s %-12s %6d %10.4f %10.4f %10.4f %+10.4f" % (label, name, m["n"], m["median_abs_ms"],
              m["p99_abs_ms"], m["max_abs_ms"], m["median_ms"]))
    c = e["connect"]
    if c:
        print("%-12s %-12s %6d %10s %10s %10s  plumb's connect_ms (set-up inside TTFT): p50 %.4f p99 %.4f ms" %
              (label, "(connect)", len(c), "", "", "", pct(c, 50), pct(c, 99)))
        result["connect_ms"] = {"n": len(c), "p50": pct(c, 50), "p99": pct(c, 99)}
    late = e["late"]
    if late:
        print("%-12s %-12s %6d %10s %10s %10s  server chunk writes after plan: p50 %.4f p99 %.4f max %.4f ms" %
              (label, "(server)", len(late), "", "", "", pct(late, 50), pct(late, 99), max(late)))
        result["server_lateness_ms"] = {"p50": pct(late, 50), "p99": pct(late, 99), "max": max(late)}
    if len(joined) != len(rows):
        print("%-12s   note: %d of %d requests joined (failed or unmatched left out)" % (label, len(joined), len(rows)))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
