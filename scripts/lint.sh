#!/usr/bin/env bash
# clang-format check over src/, tests/, bench/ (and clang-tidy over src/ unless --format-only).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h' 'bench/*.cpp' 'bench/*.h')
if [ ${#files[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${files[@]}"
fi
echo "lint: clang-format clean (${#files[@]} files)"
if [ "${1:-}" = "--format-only" ]; then exit 0; fi
build=${PLUMB_LINT_BUILD:-build/dev}
mapfile -t srcs < <(git ls-files 'src/*.cpp')
clang-tidy -p "$build" --quiet "${srcs[@]}"
