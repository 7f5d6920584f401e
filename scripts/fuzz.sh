#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan, fuzz/) and runs each one for a
# bounded time on its committed seed corpus. Fails if any target finds a crash, a sanitizer report,
# a broken invariant, a timeout or an out-of-memory; the input that did it is kept under
# build/fuzz/crashes/<target>/ (docs/fuzzing.md says how it becomes a regression test).
#
#   scripts/fuzz.sh                      every target for PLUMB_FUZZ_SECONDS (default 5) seconds (CI)
#   scripts/fuzz.sh --long 600           every target for 600 s: the longer run
#   scripts/fuzz.sh --time 30 sse http_request    chosen targets for 30 s each
#
# New inputs the fuzzer finds go to build/fuzz/corpus/<target>/ (the working corpus, kept between
# runs); fuzz/corpus/<target>/ is only read. Needs clang and libclang-rt (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${PLUMB_FUZZ_SECONDS:-5}
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --long | --time)
      seconds=${2:?"$1 needs a number of seconds"}
      shift 2
      ;;
    -h | --help)
      sed -n '2,12p' "$0"
      exit 0
      ;;
    *)
      targets+=("$1")
      shift
      ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(http_request http_chunked response_parser sse openai_request safetensors model_config
           tokenizer_json tokenizer_encode chat_template request_set dataset inferencebench search_space)
fi

# The dictionary each target mutates with (fuzz/dict/).
dict_for() {
  case "$1" in
    http_request | http_chunked | response_parser) echo fuzz/dict/http.dict ;;
    sse) echo fuzz/dict/sse.dict ;;
    search_space) echo fuzz/dict/toml.dict ;;
    openai_request | safetensors | model_config | tokenizer_json | request_set | dataset | inferencebench) echo fuzz/dict/json.dict ;;
    *) echo "" ;;
  esac
}

echo "== fuzz: build (preset fuzz) $(date -u +%H:%M:%S)"
build_start=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
echo "== fuzz: built in $(($(date +%s) - build_start)) s; ${seconds} s per target"

out=build/fuzz
failed=()
summary=()
for t in "${targets[@]}"; do
  bin=$out/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: no target '$t' (fuzz/fuzz_$t.cpp)" >&2
    failed+=("$t")
    continue
  fi
  mkdir -p "$out/corpus/$t" "$out/crashes/$t" "$out/logs"
  log=$out/logs/$t.log
  args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -max_len=16384 -print_final_stats=1
        -artifact_prefix="$out/crashes/$t/")
  d=$(dict_for "$t")
  [ -n "$d" ] && args+=(-dict="$d")
  # The HTTP server frees a connection's memory on its own threads after the exchange, so nearly
  # every input would look like a leak candidate and pay for a full leak scan: scan only at exit.
  case "$t" in http_*) args+=(-detect_leaks=0) ;; esac
  echo "== fuzz_$t ($(date -u +%H:%M:%S))"
  rc=0
  # The working corpus first: libFuzzer writes new inputs there and only reads the seeds.
  "$bin" "${args[@]}" "$out/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$out/corpus/$t" -type f | wc -l)
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "fuzz_$t FAILED (exit $rc); the report:" >&2
    grep -E -A40 'ERROR: |runtime error|invariant broken|==[0-9]+==' "$log" | head -60 >&2 || tail -40 "$log" >&2
    echo "saved input(s): $(ls "$out/crashes/$t" | tr '\n' ' ')" >&2
    echo "reproduce: $bin $out/crashes/$t/<file>   (docs/fuzzing.md: make it a regression test)" >&2
  fi
  summary+=("$(printf '%-18s %10s execs %8s exec/s  %5s corpus  %s' "$t" "${execs:-?}" "${rate:-?}" "$corpus" \
    "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)")")")
done

echo "== fuzz: summary ($(date -u +%H:%M:%S))"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "== fuzz FAILED: ${failed[*]} (inputs under $out/crashes/)" >&2
  exit 1
fi
