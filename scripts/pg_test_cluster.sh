#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `start DIR` runs initdb in DIR on a free local port
# (as the postgres user when run as root), starts it with a Unix socket in DIR, and prints the URL
# for PLUMB_TEST_POSTGRES; `stop DIR` stops it and removes DIR. Exit 1 with a reason on stderr when
# no PostgreSQL server binaries are installed (scripts/setup.sh installs them).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
bin=""
for b in /usr/lib/postgresql/*/bin; do [ -x "$b/pg_ctl" ] && bin=$b; done
[ -n "$bin" ] || { echo "pg_test_cluster: no PostgreSQL server (pg_ctl) installed" >&2; exit 1; }
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$cmd" in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$dir/data" -U plumb_admin --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    # Throwaway data: durability is not what the tests measure.
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://plumb_admin@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
