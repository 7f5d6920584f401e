#!/usr/bin/env bash
# Prints the shape of a freshly created PostgreSQL ledger in pg::catalog()'s form, as the body of
# src/ledger/pg_catalog.cpp's list: run it after changing the schema (src/ledger/pg_schema.cpp) and
# paste the lines over the list. Needs a built plumb (build/ci/plumb, or PLUMB) and a server where
# the URL's role may create a database (e.g. scripts/pg_test_cluster.sh start DIR prints one).
#
#   scripts/pg_catalog.sh postgresql://plumb_admin@127.0.0.1:PORT/postgres
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:?"usage: $0 postgresql://USER@HOST:PORT/DB (a role that may CREATE DATABASE)"}
plumb=${PLUMB:-build/ci/plumb}
db="plumb_catalog_$$"
base=${url%/*}
psql "$url" -qc "CREATE DATABASE $db" >/dev/null
trap 'psql "$url" -qc "DROP DATABASE IF EXISTS $db" >/dev/null' EXIT
"$plumb" ledger runs --ledger "$base/$db" >/dev/null
# The same two queries as live_catalog() in src/ledger/pg_ledger.cpp, over the ledger's tables.
psql "$base/$db" -At -c "
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ||
       CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND a.attnum > 0
  AND NOT a.attisdropped AND c.relname <> 'schema_version'
UNION ALL
SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' ||
       CASE k.contype WHEN 'c' THEN 'check' WHEN 'f' THEN 'foreign key' WHEN 'p' THEN 'primary key'
                      WHEN 'u' THEN 'unique' ELSE k.contype::text END
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relname <> 'schema_version'" |
  LC_ALL=C sort | sed 's/.*/      "&",/'
