#!/usr/bin/env bash
# `weft serve` against LangGraph's own server (`langgraph dev`, in-memory runtime), side by side
# in one run: N concurrent streaming runs of a ReAct agent whose scripted model calls `echo` three
# times (50 ms per model call) and then answers, each run in its own new thread.
#
#   bench/serve.sh [--n 1000] [--parts "floor sdk rust pg pg-restart langgraph"]
#                  [--only weft|langgraph] [--fault-at 0.3]
#
# Parts (all by default):
#   floor      the Rust generator against `weft-bench serve-floor`, a server that answers the two
#              requests with nothing behind them (the agent's updates, 50 ms per model turn): what
#              the machine and the generator allow, below which no server can go here
#   sdk        weft serve driven by the official Python langgraph-sdk (bench/serve_stream.py):
#              a SQLite file (durability full, the default) and `--db memory:`
#   rust       weft serve driven by the Rust load generator (`weft-bench serve-load`), which is
#              light enough not to bound the server: SQLite at durability full, at normal, and
#              `--db memory:` (no durability, as `langgraph dev`)
#   pg         two weft serve replicas on one PostgreSQL database (created for the run and dropped
#              after it; durability full), the generator spreading runs round-robin over both;
#              PostgreSQL's CPU in the batch (its postmaster and children, when on this machine)
#              is printed beside the replicas', per run
#   pg-restart the same on a PostgreSQL cluster of the script's own (initdb in a temp dir, a free
#              port of 127.0.0.1, shared_buffers=64MB, max_connections=200; stopped at the end),
#              three batches, each on a new database with two new replicas: without a fault
#              first, then with `pg_ctl restart -m fast`, then with a crash (`pg_ctl stop -m
#              immediate`, 6 s down, `pg_ctl start`). The fault is started once --fault-at (0.3)
#              of the batch's runs have begun (not after a fixed time), a run having begun when
#              the server answered its stream's request with a success status (`serve-load
#              --at-fraction 0.3 --then CMD`; the batch waits for CMD). Printed for each fault: runs ok / failed / unfinished, end of stream p50 and
#              p99 beside the fault-free batch's, "p99 delay" (the difference of the p99s) and
#              "runs delayed" (good runs whose end of stream is later than the fault-free p99),
#              how many failed runs were refused (HTTP 503 before the run existed), from every
#              run's times (`serve-load --runs-out`); and the replicas' log lines, counted. The
#              fault-free batch also prints the cluster's own CPU per run.
#   langgraph  `langgraph dev` driven by its own Python client (serve_stream.py), then by the Rust
#              generator
# `--only weft` is `--parts "floor sdk rust pg pg-restart"`, `--only langgraph` is `--parts
# langgraph`.
#
# Each part prints its figures (a table, then one JSON line); the end prints a Markdown table of
# them all. Server peak memory is VmHWM from /proc, server CPU the seconds it used during the
# batch, "per run" that over the batch's runs; client CPU is the load generator's own (Python:
# getrusage; Rust: /proc/self/stat). KEEP=1 keeps the work directory (the servers' logs,
# weft-PORT.log, every run's times) and pg-restart's cluster directory, and prints where.
#
# Builds target/release/weft and weft-bench when missing. Needs scripts/setup-clients (the SDK),
# psql and PostgreSQL for `pg` (WEFT_BENCH_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/postgres: a database weft_bench_serve is created beside it),
# initdb, pg_ctl and psql on PATH for `pg-restart` (as root they run as the OS user postgres)
# and, for the peer, a venv with `langgraph-cli[inmem]` (LANGGRAPH_VENV, default
# ~/.cache/weft/lg-venv; created when missing) and ../shared/bench/langgraph-server beside the
# repository.
set -euo pipefail
cd "$(dirname "$0")/.."

n=1000
parts="floor sdk rust pg pg-restart langgraph"
fault_at=0.3
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n="$2"; shift 2 ;;
        --parts) parts="$2"; shift 2 ;;
        --fault-at) fault_at="$2"; shift 2 ;;
        --only)
            case "$2" in
                weft) parts="floor sdk rust pg pg-restart" ;;
                langgraph) parts="langgraph" ;;
                *) echo "--only takes weft or langgraph, not $2" >&2; exit 2 ;;
            esac
            shift 2 ;;
        *) echo "unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
    esac
done
for p in $parts; do
    case "$p" in
        floor|sdk|rust|pg|pg-restart|langgraph) ;;
        *) echo "unknown part $p: the parts are floor, sdk, rust, pg, pg-restart and langgraph" >&2; exit 2 ;;
    esac
done
has() { [[ " $parts " == *" $1 "* ]]; }

if [[ ! -x target/release/weft || ! -x target/release/weft-bench ]]; then
    cargo build --release -p weft -p weft-bench
fi
gen=target/release/weft-bench
work="$(mktemp -d)"
pids=()
admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db_name=weft_bench_serve
db_url="${admin%/*}/$db_name"
pgtmp=""
pgctl=""
# PostgreSQL's server programs refuse to run as root: then they run as the OS user postgres, in
# the cluster's directory (which that user owns), not in ours.
as_pg() {
    if [[ $(id -u) == 0 ]]; then
        (cd "$pgtmp" && runuser -u postgres -- "$@")
    else
        (cd "$pgtmp" && "$@")
    fi
}
cleanup() {
    for p in "${pids[@]}"; do kill -- "$p" 2>/dev/null || true; done
    if has pg; then
        psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    if [[ -n "$pgctl" && -f "$pgtmp/data/postmaster.pid" ]]; then
        timeout 40 sh -c "$pgctl stop -m immediate" >/dev/null 2>&1 || true
    fi
    if [[ "${KEEP:-}" == 1 ]]; then
        echo "KEEP=1: the work directory is kept at $work${pgtmp:+, the cluster directory at $pgtmp}" >&2
    else
        rm -rf "$work"
        [[ -z "$pgtmp" ]] || rm -rf "$pgtmp"
    fi
}
trap cleanup EXIT
key="bench-key-0123456789abcdef"
echo "$key bench" > "$work/keys"
results="$work/results.tsv"
: > "$results"

echo "bench/serve.sh --n $n --parts \"$parts\": $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

wait_up() {
    for _ in $(seq 1 300); do
        curl -s -m 1 "$1" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server at $1 did not come up" >&2
    return 1
}

# Runs a command printing the figures (its last line is one JSON object) and files them under a
# label for the closing table.
record() {
    local label="$1"; shift
    echo "== $label (load $(cut -d' ' -f1 /proc/loadavg))"
    "$@" | tee "$work/out"
    printf '%s\t%s\n' "$label" "$(tail -1 "$work/out")" >> "$results"
}

# Prints a database's CPU (clock ticks) during a batch, in all and per run, beside the replicas'
# (the batch's JSON line, in $work/out), and files it for the closing table.
db_cpu() {
    local label="$1" ticks="$2" what="$3"
    python3 - "$work/out" "$ticks" "$(getconf CLK_TCK)" "$what" "$label" "$work/db_cpu.tsv" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
db_s = int(sys.argv[2]) / int(sys.argv[3])
per_run = db_s / r["n"] * 1000
mine = r["server_cpu_ms_per_run"]
print(f"{sys.argv[4]} used {db_s:.2f} s of CPU during that batch: {per_run:.2f} ms per run; "
      f"the replicas {mine:.2f} ms per run; together {per_run + mine:.2f} ms per run")
with open(sys.argv[6], "a") as f:
    f.write(f"{sys.argv[5]}\t{per_run}\n")
PY
}

# A PostgreSQL cluster's CPU in clock ticks, given its postmaster's pid: the postmaster's own and
# that of the children it has reaped (fields 14-17 of /proc/PID/stat: backends that ended during
# the batch count too), and its live children's (14-15). 0 without a pid.
postmaster_cpu() {
    local pm="$1" t c
    [[ -n "$pm" ]] || { echo 0; return; }
    t="$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat" 2>/dev/null || echo 0)"
    for c in $(pgrep -P "$pm"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}

# Starts `weft serve` on a port with the given options; sets $server.
start_weft() {
    local port="$1"; shift
    target/release/weft "$@" serve --agents bench/serve-agent --keys "$work/keys" \
        --listen "127.0.0.1:$port" --max-runs-per-user 100000 2>>"$work/weft-$port.log" &
    server=$!
    pids+=("$server")
    wait_up "http://127.0.0.1:$port/health"
}

# Stops servers: SIGTERM, then SIGKILL to any still running after 20 s (an exited child stays a
# zombie, state Z, until `wait` reaps it).
stop() {
    kill -TERM "$@" 2>/dev/null || true
    local p running
    for _ in $(seq 1 100); do
        running=0
        for p in "$@"; do
            [[ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null || echo Z)" == Z ]] || running=1
        done
        [[ $running == 1 ]] || break
        sleep 0.2
    done
    kill -KILL "$@" 2>/dev/null || true
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

rust_client() {
    "$gen" serve-load --n "$n" --api-key "$key" --assistant agent \
        --expect "done after 3 echo calls" "$@"
}

if has floor; then
    "$gen" serve-floor --addr 127.0.0.1:2128 2>>"$work/floor.log" &
    floor=$!
    pids+=("$floor")
    for _ in $(seq 1 100); do
        ss -ltnH 'sport = :2128' | grep -q . && break
        sleep 0.1
    done
    record "floor: serve-floor (no server work); Rust generator" rust_client \
        --url http://127.0.0.1:2128 --server-pid "$floor"
    stop "$floor"
fi

if has sdk; then
    eval "$(scripts/setup-clients)"
    py="$WEFT_TEST_SDK_PYTHON"
    for setting in "SQLite full|--db $work/sdk.db" "memory|--db memory:"; do
        label="${setting%%|*}"
        # shellcheck disable=SC2086
        start_weft 2125 ${setting#*|}
        record "weft serve, $label; Python SDK" "$py" bench/serve_stream.py \
            --url http://127.0.0.1:2125 --assistant agent --final "done after 3 echo calls" \
            --n "$n" --api-key "$key" --server-pid "$server"
        stop "$server"
    done
fi

if has rust; then
    for setting in "SQLite full|--db $work/full.db --durability full" \
        "SQLite normal|--db $work/normal.db --durability normal" "memory|--db memory:"; do
        label="${setting%%|*}"
        # shellcheck disable=SC2086
        start_weft 2125 ${setting#*|}
        record "weft serve, $label; Rust generator" rust_client \
            --url http://127.0.0.1:2125 --server-pid "$server"
        stop "$server"
    done
fi

if has pg; then
    psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
    psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null
    start_weft 2126 --db "$db_url" --durability full
    a=$server
    start_weft 2127 --db "$db_url" --durability full
    b=$server
    # PostgreSQL shares the machine: its CPU during the batch is printed beside the replicas',
    # when its postmaster (the process listening on the URL's port) is one of this machine's.
    pg_port="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port or 5432)' "$admin")"
    pm="$(ss -ltnpH "sport = :$pg_port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
    before=$(postmaster_cpu "$pm")
    label="2 weft serve replicas, PostgreSQL full; Rust generator"
    record "$label" rust_client \
        --url http://127.0.0.1:2126 --url http://127.0.0.1:2127 --server-pid "$a" --server-pid "$b"
    if [[ -n "$pm" ]]; then
        db_cpu "$label" $(($(postmaster_cpu "$pm") - before)) "PostgreSQL (postmaster $pm and its processes)"
    else
        echo "PostgreSQL's server at port $pg_port is not a process seen here: its CPU is not measured"
    fi
    stop "$a" "$b"
fi

if has pg-restart; then
    for tool in initdb pg_ctl psql; do
        command -v "$tool" >/dev/null || { echo "pg-restart needs $tool on PATH" >&2; exit 1; }
    done
    pgtmp="$(mktemp -d /tmp/weft-bench-pg.XXXXXX)"
    [[ $(id -u) != 0 ]] || chown postgres: "$pgtmp"
    pgport="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    pg_opts="-c listen_addresses=127.0.0.1 -c port=$pgport -c unix_socket_directories=$pgtmp -c shared_buffers=64MB -c max_connections=200"
    # Every pg_ctl waits at most 60 s itself (-w -t 60), and `timeout` bounds it from outside.
    pgctl="cd '$pgtmp' && $([[ $(id -u) == 0 ]] && echo 'runuser -u postgres -- ')pg_ctl -D '$pgtmp/data' -l '$pgtmp/server.log' -w -t 60"
    as_pg initdb -D "$pgtmp/data" -U postgres --auth=trust -E UTF8 >"$work/initdb.log" 2>&1 ||
        { cat "$work/initdb.log" >&2; exit 1; }
    timeout 90 sh -c "$pgctl -o '$pg_opts' start" >"$work/pg_ctl.log" 2>&1 ||
        { cat "$work/pg_ctl.log" >&2; tail -20 "$pgtmp/server.log" >&2; exit 1; }
    cluster="postgres://postgres@127.0.0.1:$pgport"
    echo "pg-restart: PostgreSQL $(postgres --version | awk '{print $3}'), a cluster of its own on 127.0.0.1:$pgport ($pgtmp)"
    cluster_cpu() { postmaster_cpu "$(head -1 "$pgtmp/data/postmaster.pid" 2>/dev/null)"; }
    # The faults, each a script the generator runs (`--then`); what they print goes to its
    # standard error, pg_ctl's own output to $work/fault.log.
    cat >"$work/restart.sh" <<SH
t0=\$(date +%s.%N)
timeout 90 sh -c "$pgctl -o '$pg_opts' restart -m fast" >>"$work/fault.log" 2>&1; rc=\$?
echo "fault: pg_ctl restart -m fast took \$(awk -v a=\$t0 -v b=\$(date +%s.%N) 'BEGIN { printf "%.2f", b - a }') s (exit \$rc)"
exit \$rc
SH
    cat >"$work/crash.sh" <<SH
t0=\$(date +%s.%N)
timeout 60 sh -c "$pgctl stop -m immediate" >>"$work/fault.log" 2>&1 || exit 1
t1=\$(date +%s.%N)
sleep 6
timeout 90 sh -c "$pgctl -o '$pg_opts' start" >>"$work/fault.log" 2>&1; rc=\$?
t2=\$(date +%s.%N)
echo "fault: pg_ctl stop -m immediate took \$(awk -v a=\$t0 -v b=\$t1 'BEGIN { printf "%.2f", b - a }') s; down 6 s; pg_ctl start (crash recovery included) took \$(awk -v a=\$t1 -v b=\$t2 'BEGIN { printf "%.2f", b - a - 6 }') s (exit \$rc)"
exit \$rc
SH
    # One batch on a new database of the cluster, with two new replicas on it; the arguments
    # after the fourth go to the generator. Sets $batch_cpu (the cluster's ticks in the batch).
    pg_batch() {
        local label="$1" pa="$2" pb="$3" db="$4"; shift 4
        psql "$cluster/postgres" -Xq -c "CREATE DATABASE $db" >/dev/null
        start_weft "$pa" --db "$cluster/$db" --durability full
        local ra=$server
        start_weft "$pb" --db "$cluster/$db" --durability full
        local rb=$server
        local before
        before=$(cluster_cpu)
        record "$label" rust_client --url "http://127.0.0.1:$pa" --url "http://127.0.0.1:$pb" \
            --server-pid "$ra" --server-pid "$rb" --deadline 120 \
            --runs-out "$work/runs-$db.jsonl" "$@"
        cp "$work/out" "$work/out-$db"
        batch_cpu=$(($(cluster_cpu) - before))
        stop "$ra" "$rb"
    }
    # The replicas' log lines (ids written <id>, timestamps dropped, the same line counted once).
    logs() {
        local f
        for f in "$@"; do
            echo "-- $(basename "$f"): $(wc -l <"$f") lines"
            sed -E 's/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/<id>/g; s/^[0-9TZ:.-]+ +//' "$f" |
                cut -c1-400 | sort | uniq -c | sort -rn | head -12
        done
    }
    base_label="2 weft serve replicas, own PostgreSQL full, no fault; Rust generator"
    pg_batch "$base_label" 2130 2131 weft_nofault
    db_cpu "$base_label" "$batch_cpu" "The cluster's processes"
    logs "$work/weft-2130.log" "$work/weft-2131.log"
    pct="$(python3 -c "print(round($fault_at * 100))")"
    pg_batch "2 replicas, own PostgreSQL, pg_ctl restart -m fast at $pct % begun; Rust generator" \
        2132 2133 weft_restart --at-fraction "$fault_at" --then "sh $work/restart.sh"
    logs "$work/weft-2132.log" "$work/weft-2133.log"
    pg_batch "2 replicas, own PostgreSQL, crash (stop -m immediate, 6 s down, start) at $pct % begun; Rust generator" \
        2134 2135 weft_crash --at-fraction "$fault_at" --then "sh $work/crash.sh"
    logs "$work/weft-2134.log" "$work/weft-2135.log"
    python3 - "$work" <<'PY' | tee "$work/faults.md"
import json, sys
work = sys.argv[1]
last = lambda path: json.loads(open(path).read().strip().splitlines()[-1])
base = last(f"{work}/out-weft_nofault")
p99 = base["total_p99_s"]
ms = lambda v: "-" if v is None else f"{v * 1000:.0f}"
print()
print("Faults in the middle of a batch (own PostgreSQL, 2 replicas). \"p99 delay\": the batch's end of")
print("stream p99 less the fault-free batch's; \"runs delayed\": good runs whose end of stream came later")
print(f"than the fault-free p99 ({ms(p99)} ms); \"in flight\": runs begun and not ended when the fault began;")
print("\"refused\": failed runs whose failure is an HTTP 503 answer to POST /threads or to the stream's")
print("request (the run was refused before it existed).")
print()
print("| batch | ok / failed / unfinished | of the failed, refused | fault from / to s | in flight at the fault | end of stream p50 ms | p99 ms | p99 delay ms | runs delayed |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
print(f"| no fault | {base['ok']} / {base['failed']} / {base['unfinished']} | - | - | - "
      f"| {ms(base['total_p50_s'])} | {ms(p99)} | - | - |")
for name, db in [("pg_ctl restart -m fast", "weft_restart"),
                 ("crash: stop -m immediate, 6 s down, start", "weft_crash")]:
    r = last(f"{work}/out-{db}")
    runs = [json.loads(l) for l in open(f"{work}/runs-{db}.jsonl")]
    t = r.get("then") or {}
    at = t.get("started_s")
    in_flight = "-" if at is None else sum(
        1 for x in runs if x["status"] == "unfinished" or x["start_s"] <= at < x["end_s"])
    delayed = "-" if p99 is None else sum(
        1 for x in runs if x["status"] == "ok" and x["total_s"] > p99)
    refused = sum(1 for x in runs if x["status"] == "failed" and x["error"].startswith("POST /")
                  and ": HTTP 503 " in x["error"])
    d99 = None if r["total_p99_s"] is None or p99 is None else r["total_p99_s"] - p99
    window = "-" if at is None else f"{at:.2f} / {t['ended_s']:.2f}"
    print(f"| {name} ({t.get('status', 'no command')}) | {r['ok']} / {r['failed']} / {r['unfinished']} "
          f"| {refused} | {window} | {in_flight} | {ms(r['total_p50_s'])} | {ms(r['total_p99_s'])} "
          f"| {ms(d99)} | {delayed} of {r['ok']} |")
    if r.get("errors"):
        print(f"|  failures: {json.dumps(r['errors'])[:600]} |")
PY
fi

if has langgraph; then
    eval "$(scripts/setup-clients)"
    py="$WEFT_TEST_SDK_PYTHON"
    venv="${LANGGRAPH_VENV:-$HOME/.cache/weft/lg-venv}"
    if [[ ! -x "$venv/bin/langgraph" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "langgraph-cli[inmem]" langgraph-sdk
    fi
    peer=../shared/bench/langgraph-server
    "$venv/bin/langgraph" --version 2>/dev/null | head -1 || true
    # A fresh server for each client: one that holds the first batch's threads is slower.
    start_peer() {
        pgid="$(VENV="$venv" PORT=2124 "$peer/start_server.sh" "$work/langgraph.log" --n-jobs-per-worker 100)"
        pids+=("-$pgid")
        pid="$(ss -ltnpH 'sport = :2124' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
    }
    stop_peer() {
        kill -- "-$pgid" 2>/dev/null || true
        for _ in $(seq 1 150); do
            ss -ltnH 'sport = :2124' | grep -q . || return 0
            sleep 0.2
        done
        echo "langgraph dev did not stop within 30 s" >&2
        return 1
    }
    start_peer
    record "langgraph dev (memory), --n-jobs-per-worker 100; Python SDK" "$py" bench/serve_stream.py \
        --url http://127.0.0.1:2124 --assistant agent \
        --final "done after 3 echo calls" --n "$n" --server-pid "$pid"
    stop_peer
    start_peer
    record "langgraph dev (memory), --n-jobs-per-worker 100; Rust generator" rust_client \
        --url http://127.0.0.1:2124 --server-pid "$pid"
    stop_peer
fi

echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$results" "$work/db_cpu.tsv" "$work/faults.md" <<'EOF'
import json, os, sys
rows = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[1]) if line.strip()]
def s(v, scale=1.0, fmt=None):
    if v is None:
        return "-"
    v *= scale
    return (fmt or ("{:.0f}" if v >= 100 else "{:.3g}")).format(v)
# runs/s against `langgraph dev` driven by its own client, when that part ran.
peer = [json.loads(js) for label, js in rows if label.startswith("langgraph dev") and "Python SDK" in label]
peer_rate = peer[0]["ok"] / peer[0]["wall_s"] if peer and peer[0]["ok"] else None
def times(r):
    return "-" if not peer_rate else f"{r['ok'] / r['wall_s'] / peer_rate:.1f}×"
# The servers' CPU over the batch's runs (the Python client's line has only the seconds).
def per_run(r):
    if r.get("server_cpu_ms_per_run") is not None:
        return r["server_cpu_ms_per_run"]
    return None if r.get("server_cpu_s") is None else r["server_cpu_s"] * 1000 / r["n"]
print("| run | ok / n | wall s | runs/s | ÷ langgraph dev (own client) | first event p50 ms | p99 ms | end of stream p50 ms | p99 ms | server peak MB | server CPU s | server CPU ms / run | client CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for label, js in rows:
    r = json.loads(js)
    print(f"| {label} | {r['ok']} / {r['n']} | {s(r['wall_s'])} | {s(r['runs_per_s'], fmt='{:.1f}')} | {times(r)} "
          f"| {s(r['first_p50_s'], 1000)} | {s(r['first_p99_s'], 1000)} "
          f"| {s(r['total_p50_s'], 1000)} | {s(r['total_p99_s'], 1000)} "
          f"| {s(r.get('server_peak_mb'))} | {s(r.get('server_cpu_s'))} "
          f"| {s(per_run(r), fmt='{:.2f}')} | {s(r.get('client_cpu_s'))} |")
    if r.get("errors"):
        print(f"|  failures: {json.dumps(r['errors'])[:300]} |")
print()
print("Where the first event's time goes (Rust generator; from a run's start, p50 / p99 ms):")
print()
print("| run | thread created | stream head | first event |")
print("|---|---:|---:|---:|")
for label, js in rows:
    r = json.loads(js)
    if "thread_p50_s" in r:
        cell = lambda a, b: f"{s(r[a], 1000)} / {s(r[b], 1000)}"
        print(f"| {label} | {cell('thread_p50_s', 'thread_p99_s')} | {cell('head_p50_s', 'head_p99_s')} "
              f"| {cell('first_p50_s', 'first_p99_s')} |")
db = dict(line.rstrip("\n").split("\t") for line in open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
if db:
    print()
    print("CPU per run (ms): the servers', the database's (PostgreSQL on this machine; SQLite is inside the server):")
    print()
    print("| run | servers | database | together |")
    print("|---|---:|---:|---:|")
    for label, js in rows:
        r = json.loads(js)
        mine = per_run(r)
        if mine is None or "Rust generator" not in label or not label.startswith(("weft serve", "2 ")):
            continue
        d = float(db[label]) if label in db else None
        both = mine + d if d is not None else None
        print(f"| {label} | {mine:.2f} | {'-' if d is None else f'{d:.2f}'} | {'-' if both is None else f'{both:.2f}'} |")
if os.path.exists(sys.argv[3]):
    print(open(sys.argv[3]).read(), end="")
EOF
