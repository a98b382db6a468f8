#!/usr/bin/env bash
# What one PostgreSQL carries of weft's own statements, and what gives out first as workers grow
# (docs/scaling.md). `weft-bench pg-capacity` drives the real store (weft_store::PgStore: its
# statements, its pools, appends at durability full) against a database made for the run:
#
#   append   C callers, each appending one-event batches (a tool_call_finished of a few hundred
#            bytes) to its own session under its own lease
#   renew    C callers, each renewing its own lease in a loop
#   claim    1,000 sessions queued as `weft submit` leaves them; C callers each claiming up to 8
#            (Leases::claim) and releasing them at once, so that claims keep finding work
#   sim      W simulated `weft worker`s (default 100, 300, 1,000) on 2 sessions each: every
#            worker claims up to its 8 free slots each second (and when a session ends), renews
#            each lease every third of the lease time (15 s), reads it every 500 ms (the owner's
#            look for cancel/pause) and releases it after 5-25 s; claims and renewals offered
#            against made, their latencies, late renewals and leases lost
#
# One store is one weft process: a pool of 8 connections and 2 more for leases. Each caller gets
# a connection of its own within a budget of 64 connections (--connections): C callers over
# ceil(C/8) stores (ceil(C/2) for renewals), at most 6 stores (21 for renewals); the simulated
# workers share 6 stores (60 connections), as workers behind a pooler would: 1,000 real workers
# would open up to 10,000. Every phase has a schema of its own, whose tables start with 1,000
# ended sessions (an event and a released lease each) and are analyzed (as autovacuum would) when
# the phase starts measuring. While a phase runs, pg_stat_activity is sampled every 100 ms
# (which statement each busy backend runs, what it waits on); around it, the CPU seconds of every
# process of the PostgreSQL cluster (the postmaster and its children, from /proc, as
# bench/serve.sh counts them), of the bench and of the machine are read, so that each rate can be
# divided by the PostgreSQL CPU it cost ("per core": operations per CPU-second of PostgreSQL).
# Prints Markdown tables, then one JSON line.
#
#   bench/pg-capacity.sh [--seconds 10] [--concurrency "1 4 16 64"] [--workers "100 300 1000"]
#                        [any other `weft-bench pg-capacity` option, e.g. --sim-seconds 15]
#
# Environment: WEFT_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres): a
# database weft_bench_capacity is created beside it and dropped on exit. PostgreSQL's CPU is
# measured only when the server runs on this machine. Uses target/release/weft-bench (built if
# missing) and psql. Takes about three and a half minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db_name=weft_bench_capacity
db_url="${admin%/*}/$db_name"
[[ -x target/release/weft-bench ]] || cargo build --release -p weft-bench
bench="$PWD/target/release/weft-bench"

drop() { psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true; }
trap drop EXIT
drop
psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null

echo "bench/pg-capacity.sh $*: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" pg-capacity --url "$db_url" "$@"
echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
