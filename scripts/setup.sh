#!/usr/bin/env bash
# Installs everything plumb needs to build, test and run on Debian 12, from Debian's packages.
# Idempotent: safe to run again. Needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential g++ cmake ninja-build ccache pkg-config git python3
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libdnnl-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libtomlplusplus-dev libsqlite3-dev sqlite3 libicu-dev
  postgresql libpqxx-dev  # the shared ledger (postgresql:// ledgers) and the server its tests run against
  slurmctld slurmd slurm-client munge  # the Slurm executor's tests: a throwaway cluster (scripts/slurm_test_cluster.sh)
  slurmrestd slurm-wlm-jwt-plugin  # ... with slurmrestd and JSON Web Tokens (the executor's --slurm-rest)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format clang-tidy
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes: scripts/fuzz.sh (fuzz/)
  chromium  # headless: the HTML report test renders plumb bench --html (tests/report)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
