#!/usr/bin/env bash
# The main job: installs dependencies, builds plumb (release), then `plumb tune` with no arguments:
# tunes plumb's own engine (`plumb serve`, shipped model models/plumb-tiny) on protocol scenario D
# (general), small size class: a pre-flight noise check first (4 runs of the `default` preset; a
# machine far over the protocol's CV cap stops here, saying what to do), then the Bayesian strategy
# for ~150 s of trials, measures the top three twice more each (the best by its mean), re-validates the best configuration against the engine's `default` preset
# (pre-registered pairs on held-out seeds, 5 or more as the pre-flight CV needs, and more up to a
# registered bound while the CI is too wide or an arm's CV near the cap) and both gates, and
# prints the result table. The engine and the client run on separate cores where there are two.
# Results go to plumb.db (the ledger) in the working directory; engine logs and the best
# configuration (study-<id>-best.toml) to out/tune/.
# Extra arguments go to `plumb tune` (e.g. --time-budget 600, --naive, --json tune.json,
# --html tune.html; --resume ID continues an interrupted study).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target plumb
exec ./build/release/plumb tune --work-dir out/tune "$@"
