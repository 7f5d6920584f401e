#!/bin/bash
# Runs on the Xeon device host (BENCHMARKS.md, "Machines") from the repository root, with
# .dev/bundle.tar.xz from bench/device_bundle.sh carried along: client capacity (server on CPUs 0-5,
# client on CPU 8) and the end-to-end false-positive rate of the compare rule (20 self-comparisons,
# five at a time, each on two CPUs of its own). Usage: bench/device_runs.sh [all|cap|fp]; the
# readouts land in $OUT/fp.tgz ($OUT unset: the repository root).
set -u
# The readout commands print "verdict ..."; a comparison that could not register prints nothing.
R=$(pwd)
tar xJf .dev/bundle.tar.xz -C /tmp
P=/tmp/bundle/plumb
echo "host: $(nproc) cpus, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo)"; $P --version
cat /proc/loadavg
export PLUMB_MODELS_DIR=$R/models
if [ "${1:-all}" != fp ]; then
SERVER_CPUS=0-5 CLIENT_CPUS=8 SERVER_ARGS="--io-threads 4" STREAMS="1000 2000 3000" bash bench/serve_bench.sh $P capacity-ramp
SERVER_CPUS=0-5 CLIENT_CPUS=8 SERVER_ARGS="--io-threads 4" bash bench/serve_bench.sh $P capacity
fi
if [ "${1:-all}" != cap ]; then
mkdir -p /tmp/fp && cd /tmp/fp || exit 1
printf 'adapter = "plumb"\n[params]\nengine = "synthetic"\nttft_ms = 10.0\nitl_ms = 2.0\nthreads = 1\n' > same.toml
one() {
  s=$1; c=$2
  id=$(taskset -c $c $P compare register --a same.toml --b same.toml --scenario D --size small --pairs 5 --seed $s --ledger fp-$s.db 2>/dev/null | grep -o '[0-9]\+' | head -1)
  taskset -c $c $P compare run $id --ledger fp-$s.db > run-$s.txt 2>&1
  taskset -c $c $P compare readout $id --ledger fp-$s.db > readout-$s.txt 2>&1
  echo "seed $s: $(grep -E 'verdict|ratio B/A' readout-$s.txt | tr -s ' ' | tr '\n' ' ')"
}
for g in 0 1 2 3; do
  for k in 1 2 3 4 5; do s=$((g * 5 + k)); one $s "$((2*k)),$((2*k+1))" & done
  wait; echo "group $g done $(date +%T)"
done
tar czf "${OUT:-$R}/fp.tgz" run-*.txt readout-*.txt  # $OUT: the device tool's folder
fi
