#!/usr/bin/env python3
"""A scripted external proposer for tests/tune/study_e2e_test.cpp.

Reads plumb tune's JSON context on stdin, appends it to the file named by argv[1] (so the test can
inspect what it received), and proposes by history length: ttft 60 ms, then an engine setting
that cannot start (an unknown delay distribution), then ttft 20 ms. The rationale reports what it
saw, so the test can check that history and notes reach the proposer.
"""
import json
import sys

ctx = json.load(sys.stdin)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(ctx) + "\n")
hist = ctx["history"]
n = len(hist)
infeasible = sum(1 for h in hist if not h["feasible"])
plan = [
    {"ttft_ms": 60.0, "distribution": "constant"},
    {"ttft_ms": 40.0, "distribution": "no_such_distribution"},
    {"ttft_ms": 20.0, "distribution": "constant"},
]
if n >= len(plan):
    print(json.dumps({"stop": True, "rationale": "plan done"}))
    sys.exit(0)
why = "history %d" % n
if infeasible:
    why += " (%d infeasible)" % infeasible
why += ", notes %d" % len(ctx["notes"])
print(json.dumps({"config": plan[n], "rationale": why, "notes": "note %d" % (n + 1)}))
