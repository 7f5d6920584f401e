#!/usr/bin/env bash
# The test command: installs dependencies, builds everything (tests and benchmarks too, with
# -Werror), checks formatting, and runs the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
preset=${PLUMB_PRESET:-ci}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
bash scripts/lint.sh --format-only
ctest --preset "$preset" "$@"
