#!/usr/bin/env python3
"""An example external proposer for `plumb tune --strategy external` (protocol: docs/tuning.md).

plumb runs this program once per trial with a JSON context on stdin (the search space, the
history of finished trials with their objectives, metrics and failures, the budget left, and the
notes this program wrote before) and reads one JSON proposal from stdout. Replace the body of
`propose` with an LLM call to plug an agent in: give it the context, ask for a configuration and
a rationale, validate, print.

This one does a coordinate search: start from the engine's defaults, then move one parameter at a
time to a neighbouring value around the best feasible trial so far, never re-proposing a measured
configuration and never re-proposing one that failed; it keeps its plan in `notes`.

    plumb tune --strategy external --proposer 'python3 tools/proposers/example_proposer.py' --trials 10
"""
import json
import math
import random
import sys


def domain(p):
    """The values a parameter may take, in order (a few points for ranges)."""
    if "values" in p:
        return list(p["values"])
    if p["type"] == "bool":
        return [False, True]
    lo, hi = p["low"], p["high"]
    pts = []
    for i in range(7):
        f = i / 6
        x = math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo))) if p.get("log") else lo + f * (hi - lo)
        x = int(round(x)) if p["type"] == "int" else x
        if x not in pts:
            pts.append(x)
    return pts


def active(p, config):
    for name, allowed in p.get("when", {}).items():
        if name not in config or config[name] not in allowed:
            return False
    return True


def normalize(space, config):
    """Keep exactly the active parameters; fill a newly active one with its default or first value."""
    out = {}
    for p in space["params"]:
        if not active(p, out):
            continue
        if p["name"] in config:
            out[p["name"]] = config[p["name"]]
        else:
            out[p["name"]] = p.get("default", domain(p)[0])
            if out[p["name"]] not in domain(p) and "values" in p:
                out[p["name"]] = domain(p)[0]
    return out


def key(config):
    return json.dumps(config, sort_keys=True)


def propose(ctx):
    space, history = ctx["space"], ctx["history"]
    measured = {key(h["config"]) for h in history}
    failed = [h for h in history if not h["feasible"]]
    feasible = [h for h in history if h["feasible"] and h["objective"] is not None and h["stage"] == "full"]
    if not history:
        start = normalize(space, {p["name"]: p["default"] for p in space["params"] if "default" in p})
        return start, "start from the engine's defaults", "plan: coordinate search around the best"
    base = max(feasible, key=lambda h: h["objective"])["config"] if feasible else history[0]["config"]
    rng = random.Random(len(history))
    moves = []
    for p in space["params"]:
        if p["name"] not in base:
            continue
        vals = domain(p)
        cur = base[p["name"]]
        i = vals.index(cur) if cur in vals else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(vals):
                c = dict(base)
                c[p["name"]] = vals[j]
                c = normalize(space, c)
                if key(c) not in measured:
                    moves.append((p["name"], vals[j], c))
    if not moves:  # a local optimum on this grid: jump somewhere new
        for _ in range(100):
            c = normalize(space, {p["name"]: rng.choice(domain(p)) for p in space["params"]})
            if key(c) not in measured:
                return c, "no unmeasured neighbour of the best: random restart", "restarted"
        return None, "every configuration I can think of is measured", ""
    name, value, config = rng.choice(moves)
    why = "best so far %s; try %s = %s (%d infeasible trials so far)" % (
        "%.4g" % max(h["objective"] for h in feasible) if feasible else "none", name, value, len(failed))
    return config, why, "last move: %s -> %s" % (name, value)


def main():
    ctx = json.load(sys.stdin)
    if ctx.get("schema_version") != 1:
        print("unsupported context schema_version %r" % ctx.get("schema_version"), file=sys.stderr)
        return 2
    config, why, notes = propose(ctx)
    if config is None:
        print(json.dumps({"stop": True, "rationale": why}))
    else:
        print(json.dumps({"config": config, "rationale": why, "notes": notes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
