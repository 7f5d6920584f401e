#!/usr/bin/env bash
# The test command: installs dependencies, builds everything (tests and benchmarks too, with
# -Werror), runs the whole test suite, runs the server's tests (faults included) against an
# ASan+UBSan build of the engine and server path, runs every fuzz target for a bounded time
# (scripts/fuzz.sh), lints (clang-format, clang-tidy), and checks that every document a file cites
# is in the repository (scripts/check_docs.sh).
# CI runs exactly this. Every stage after the build runs even if an earlier one failed, so one run
# shows every problem; the exit status is non-zero if any stage failed.
# Arguments go to the main ctest run (e.g. -L unit, -R Tokenizer).
# PLUMB_SKIP_TIDY=1 / PLUMB_SKIP_ASAN=1 / PLUMB_SKIP_FUZZ=1 skip those stages for a quick local run
# (CI skips nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
preset=${PLUMB_PRESET:-ci}
failed=()
stage() { echo "== $1 ($(date -u +%H:%M:%S))"; }

stage "build ($preset)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"

stage "tests ($preset)"
# A throwaway PostgreSQL cluster for the shared-ledger tests (scripts/pg_test_cluster.sh), stopped at
# exit; the tests that need it skip, saying why, only where it cannot be started.
pg_dir=$(mktemp -d /tmp/plumb_pg_XXXXXX)
# And a throwaway single-node Slurm (scripts/slurm_test_cluster.sh) for the Slurm executor's tests
# (ctest -L slurm), stopped at exit too.
slurm_dir=$(mktemp -d /tmp/plumb_slurm_XXXXXX)
trap 'bash scripts/pg_test_cluster.sh stop "$pg_dir"; bash scripts/slurm_test_cluster.sh stop "$slurm_dir"' EXIT
if url=$(bash scripts/pg_test_cluster.sh start "$pg_dir"); then
  export PLUMB_TEST_POSTGRES="$url"
else
  echo "tests: no PostgreSQL cluster could be started; the shared-ledger tests will skip" >&2
fi
if conf=$(bash scripts/slurm_test_cluster.sh start "$slurm_dir"); then
  export PLUMB_TEST_SLURM="$conf"
else
  echo "tests: no Slurm cluster could be started; the Slurm executor's tests will skip" >&2
fi
ctest --preset "$preset" "$@" || failed+=("tests")

if [ "${PLUMB_SKIP_ASAN:-0}" != 1 ]; then
  # The server's fault tests (corpus, 1,000 clients, vanishing clients, KV exhaustion, full
  # queue) under ASan+UBSan. Only serve and generate are compiled into this plumb
  # (PLUMB_CLI_COMMANDS): all that these tests run.
  stage "ASan+UBSan build (engine and server path)"
  if cmake --preset asan -DPLUMB_CLI_COMMANDS="serve;generate" >/dev/null &&
    cmake --build --preset asan --target plumb server_api_test server_fault_test serve_test server_edges_test; then
    stage "ASan+UBSan server tests"
    # Not EdgesLimits.AcceptErrors...: it runs the server out of file descriptors, and UBSan's vptr
    # check, which reads /proc/self/maps, then reports a false "invalid vptr" in the log call.
    ctest --preset asan -R '^(Api|Faults|ServeLimits|Edges[A-Za-z]*)\.' -E 'AcceptErrorsAreLogged' \
      --no-tests=error || failed+=("asan tests")
  else
    failed+=("asan build")
  fi
fi

if [ "${PLUMB_SKIP_FUZZ:-0}" != 1 ]; then
  # Every libFuzzer target (fuzz/) for a few seconds each under ASan+UBSan (clang).
  stage "fuzz (bounded)"
  bash scripts/fuzz.sh || failed+=("fuzz")
fi

stage "lint"
if [ "${PLUMB_SKIP_TIDY:-0}" = 1 ]; then
  bash scripts/lint.sh --format-only || failed+=("clang-format")
else
  PLUMB_LINT_BUILD="build/$preset" bash scripts/lint.sh || failed+=("lint")
fi

stage "docs"
bash scripts/check_docs.sh || failed+=("docs")

if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED: ${failed[*]}" >&2
  exit 1
fi
stage "all passed"
