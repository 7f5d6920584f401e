#!/usr/bin/env bash
# The main job: installs dependencies, builds plumb (release), then `plumb tune` with no arguments:
# tunes plumb's own engine (`plumb serve`, shipped model models/plumb-tiny) on protocol scenario D
# (general), small size class, with the Bayesian strategy for ~150 s of trials, re-validates the
# best configuration against the engine's `default` preset (5 pre-registered pairs on held-out
# seeds) and both gates, and prints the result table. Results go to plumb.db (the ledger) in the
# working directory; engine logs and the best configuration (study-<id>-best.toml) to out/tune/.
# Extra arguments go to `plumb tune` (e.g. --time-budget 600, --naive, --json tune.json,
# --html tune.html; --resume ID continues an interrupted study).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target plumb
exec ./build/release/plumb tune --work-dir out/tune "$@"
