#!/usr/bin/env python3
"""Per-op kernel times of the steps cuda_runner_bench --profile 1 brackets, from an ncu CSV.

Usage: ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
           cuda_runner_bench ... --profile 1 > prof.csv
       python3 bench/cuda_profile.py prof.csv [LABEL...]

Each bracketed step starts with the embedding kernel; LABELs name the steps in order. Kernels are
grouped by name and grid (cuBLAS GEMMs of different shapes stay apart); per group: launches, total
microseconds and the share of the step's kernel time. ncu serializes kernels and flushes caches
between them, so the sum is the step's device work without overlap or launch gaps, not its wall time.
"""
import csv
import io
import re
import sys

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def rows(path):
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV table found")
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            yield r


def short(name):
    name = name.replace("plumb::cuda::(anonymous namespace)::", "").replace("plumb::<unnamed>::", "")
    name = re.sub(r"\(.*", "", name)
    return name.replace("void ", "").strip()


def main():
    path, labels = sys.argv[1], sys.argv[2:]
    steps = []
    for r in rows(path):
        n = short(r["Kernel Name"])
        if "embedding" in n or not steps:
            steps.append([])
        us = float(r["Metric Value"].replace(",", "")) * SCALE.get(r["Metric Unit"], 1.0)
        steps[-1].append((n, r.get("Grid Size", ""), us))
    for i, st in enumerate(steps):
        label = labels[i] if i < len(labels) else f"step {i}"
        total = sum(us for _, _, us in st)
        print(f"== {label}: {len(st)} kernels, {total / 1e3:.3f} ms of kernel time")
        groups = {}
        for n, grid, us in st:
            g = groups.setdefault((n[:70], grid), [0, 0.0])
            g[0] += 1
            g[1] += us
        for (n, grid), (c, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"  {us / 1e3:8.3f} ms {100 * us / total:5.1f}%  x{c:<4d} {n} grid {grid}")


if __name__ == "__main__":
    main()
