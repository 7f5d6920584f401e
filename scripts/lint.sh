#!/usr/bin/env bash
# Lint: clang-format check over src/, tests/, bench/, fuzz/, then clang-tidy (.clang-tidy: every finding is
# an error) over src/ with the compile database of a configured build (default build/ci; set
# PLUMB_LINT_BUILD). --format-only skips clang-tidy. CI runs both through scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h' 'bench/*.cpp' 'bench/*.h' 'fuzz/*.cpp' 'fuzz/*.h')
if [ ${#files[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${files[@]}"
fi
echo "lint: clang-format clean (${#files[@]} files)"
if [ "${1:-}" = "--format-only" ]; then exit 0; fi
build=${PLUMB_LINT_BUILD:-build/ci}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: no $build/compile_commands.json: configure that build first (cmake --preset ci)" >&2
  exit 2
fi
mapfile -t srcs < <(git ls-files 'src/*.cpp')
start=$(date +%s)
# One clang-tidy per core; xargs exits non-zero if any file has a finding.
if ! printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet \
  2> >(grep -v -E '^[0-9]+ warnings? generated\.$|^Suppressed|^Use -header-filter' >&2); then
  echo "lint: clang-tidy found problems (above); fix them or, with a reason, adjust .clang-tidy" >&2
  exit 1
fi
echo "lint: clang-tidy clean (${#srcs[@]} files, $(( $(date +%s) - start )) s)"
