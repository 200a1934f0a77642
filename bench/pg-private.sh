#!/bin/sh
# A private PostgreSQL 15 cluster for measuring where PostgreSQL's own CPU goes (docs/throughput.md,
# "PostgreSQL: where it stands"): the shared service on 5432 serves other sessions too, so its
# processes' CPU and its pg_stat_statements would mix their work with the bench's.
#
# Same durability as the service (fsync, synchronous_commit, full_page_writes on; read committed
# by default; autovacuum off, as there), plus pg_stat_statements and track_io_timing.
#
#   bench/pg-private.sh start   # initdb (once) and start on port ${GANTRY_PG_PRIVATE_PORT:-5433}
#   bench/pg-private.sh env     # the variables that point the bench and its peer at it
#   bench/pg-private.sh stop    # stop it (the data stays in $DIR; `rm -rf` it when done)
#
# Then, e.g.: eval "$(bench/pg-private.sh env)"; GANTRY_BENCH_PG_COUNT=DIR flock /tmp/gantry-heavy.lock \
#   node --import tsx bench/throughput.ts --store postgres --chains 1000 --peers graphile --warm 0 --probes 0 --out ''
# With GANTRY_BENCH_PG_STATEMENTS=1 (which `env` sets) the bench prints, per system, the cluster's CPU a
# stage (the postmaster's process tree from /proc) and its top statements by total time.
set -eu
PORT=${GANTRY_PG_PRIVATE_PORT:-5433}
DIR=${GANTRY_PG_PRIVATE_DIR:-/tmp/gantry-pg-private}
BIN=/usr/lib/postgresql/15/bin
# initdb and postgres refuse to run as root: run them as the postgres user where we are root.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "${1:-}" in
start)
  if [ ! -f "$DIR/PG_VERSION" ]; then
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres "$DIR"
    as_pg "$BIN/initdb" -D "$DIR" -A trust -U postgres --no-sync >/dev/null
    cat >>"$DIR/postgresql.conf" <<EOF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
shared_buffers = 128MB
max_connections = 100
max_wal_size = 1GB
autovacuum = off
fsync = on
synchronous_commit = on
full_page_writes = on
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 5000
track_io_timing = on
EOF
  fi
  as_pg "$BIN/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w start >/dev/null
  as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atqc "select 1 from pg_database where datname = 'test'" | grep -q 1 ||
    as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc 'create database test'
  as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d test -qc 'create extension if not exists pg_stat_statements'
  echo "PostgreSQL on 127.0.0.1:$PORT, data in $DIR"
  ;;
env)
  echo "export GANTRY_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:$PORT/test GANTRY_BENCH_PG_URL=postgres://postgres@127.0.0.1:$PORT/test GANTRY_BENCH_PG_STATEMENTS=1"
  ;;
stop)
  as_pg "$BIN/pg_ctl" -D "$DIR" -m fast -w stop >/dev/null
  echo "stopped (data left in $DIR)"
  ;;
*)
  echo "usage: $0 start|env|stop" >&2
  exit 2
  ;;
esac
