#!/usr/bin/env bash
# The main job on the embedded default: installs dependencies, builds plumb (release), and runs
# plumb's main job against its own reference engine with the shipped small model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target plumb
exec ./build/release/plumb generate --prompt "The capital of the world is" --max-tokens 32 "$@"
