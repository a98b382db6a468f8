"""weft from Python: what a Python tool call and a ReAct iteration cost through the `weft`
package (crates/weft-py), against the same work done in Python alone.

    python python_bench.py tool N DURABILITY [--runs R]
    python python_bench.py batch N DURABILITY [--runs R]
    python python_bench.py react N DURABILITY [--runs R]
    python python_bench.py react_idem N DURABILITY [--runs R]

DURABILITY is `normal` (SQLite synchronous=NORMAL) or `full` (synchronous=FULL, a sync at every
commit); `tool` and `batch` also take `memory` (the `memory:` store, nothing written to disk).

- `tool N D`: `weft.plan.run` of a plan of N independent steps, each a call of the Python tool
  `echo(text) -> text`, timed end to end (loading the plan and its tools, running the session,
  writing its log), against N direct calls of the same function. Per call: through weft, direct,
  and the difference (weft's cost of a call).
- `batch N D`: the same N calls through a ReAct agent: a scripted model asks for all N in one
  reply, then answers; the run's time per call, against a direct call.
- `react N D`: a ReAct agent (`weft.Agent(mode="react")`, scripted model) that calls `echo` N
  times, one call per model reply, then answers: `agent.run` timed (not the agent's
  construction, as the LangGraph peer times `invoke` only), per iteration; the database size
  after the run (database plus write-ahead log, after a checkpoint, as bench/langgraph_peer.py
  measures its own).
- `react_idem N D`: `react` with the tool declared idempotent (`@weft.tool(idempotent=True)`):
  safe to run again after a crash. Whether weft then writes fewer commits for it is what this
  workload shows (BENCHMARKS.md: the syncs counted were the same).

Every run is in a fresh temporary directory with a fresh database; a run that did not complete,
or made another number of tool calls than asked, fails the benchmark (it is never reported).
With `--runs R` (default 1) the figures are the medians of R runs in this process.

Each workload prints one machine-readable line,
`weft-py WORKLOAD n=N durability=D: key=value ...`, then a line for people.
"""

import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

import weft


@weft.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@weft.tool(name="echo", idempotent=True)
def echo_idempotent(text: str) -> str:
    """Echo the text back."""
    return text


def direct_us(n):
    """Microseconds per direct call of the function, over n calls (the best of 5 rounds)."""
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for i in range(n):
            echo(f"step {i}")
        dt = time.perf_counter() - t
        best = dt if best is None or dt < best else best
    return best / n * 1e6


def store_in(tmp, durability, n):
    """The `db`, and the agent file of the plan: its durability (none for `memory:`) and enough
    waves for n steps (weft's default is 100 waves of at most 4 steps; max_parallel is left at 4)."""
    spec = {"name": "bench", "limits": {"max_waves": n + 1}}
    if durability != "memory":
        spec["durability"] = durability
    agent = os.path.join(tmp, "plan-agent.json")
    with open(agent, "w") as f:
        json.dump(spec, f)
    return ("memory:" if durability == "memory" else os.path.join(tmp, "weft.db")), agent


def db_mb(db):
    """The database file plus its write-ahead log, after a checkpoint, in MB."""
    if not os.path.exists(db):
        return 0.0
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p)) / 1e6


def check(result, n, what):
    if result.status != "completed" or result.tool_calls != n:
        sys.exit(
            f"python_bench: {what}: status={result.status} tool_calls={result.tool_calls} "
            f"(expected completed and {n}); error={result.error!r}"
        )


def tool_run(n, durability):
    tmp = tempfile.mkdtemp(prefix="weft-py-bench-")
    try:
        db, agent = store_in(tmp, durability, n)
        plan = {"steps": [{"_id": f"s{i}", "_tool": "echo", "text": f"step {i}"} for i in range(n)]}
        t = time.perf_counter()
        result = weft.plan.run(plan, tools=[echo], agent=agent, db=db)
        dt = time.perf_counter() - t
        check(result, n, f"tool {n} {durability}")
        return {"total_ms": dt * 1e3, "us_per_call": dt / n * 1e6}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_script(path, replies):
    # JSON is YAML: the scripted model reads either.
    with open(path, "w") as f:
        json.dump(replies, f)


def batch_run(n, durability):
    tmp = tempfile.mkdtemp(prefix="weft-py-bench-")
    try:
        db = "memory:" if durability == "memory" else os.path.join(tmp, "weft.db")
        script = os.path.join(tmp, "script.yaml")
        calls = [{"name": "echo", "arguments": {"text": f"step {i}"}} for i in range(n)]
        write_script(script, [{"tool_calls": calls}, {"text": "done"}])
        extra = {} if durability == "memory" else {"durability": durability}
        agent = weft.Agent(
            "bench", model=f"scripted:{script}", mode="react", instructions="Echo.",
            tools=[echo], db=db, limits={"max_waves": n + 1}, **extra,
        )
        t = time.perf_counter()
        result = agent.run("go")
        dt = time.perf_counter() - t
        check(result, n, f"batch {n} {durability}")
        agent.close()
        return {"total_ms": dt * 1e3, "us_per_call": dt / n * 1e6}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def react_run(n, durability, tool=echo):
    tmp = tempfile.mkdtemp(prefix="weft-py-bench-")
    try:
        db = os.path.join(tmp, "weft.db")
        script = os.path.join(tmp, "script.yaml")
        replies = [
            {"tool_calls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(n)
        ]
        write_script(script, replies + [{"text": "done"}])
        t0 = time.perf_counter()
        agent = weft.Agent(
            "bench", model=f"scripted:{script}", mode="react", instructions="Echo the steps.",
            tools=[tool], db=db, durability=durability,
            # weft's default is 25 model turns per run; N tool replies and the answer need N + 1
            # (the peer raises LangGraph's recursion_limit likewise, to 4 N + 10).
            limits={"max_iterations": n + 1},
        )
        t = time.perf_counter()
        result = agent.run("go")
        dt = time.perf_counter() - t
        check(result, n, f"react {n} {durability}")
        if result.answer != "done":
            sys.exit(f"python_bench: react {n} {durability}: answer {result.answer!r}, expected 'done'")
        agent.close()
        return {
            "total_ms": dt * 1e3,
            "us_per_iter": dt / n * 1e6,
            "setup_ms": (t - t0) * 1e3,
            "db_mb": db_mb(db),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def median_of(runs, fn, *args):
    got = [fn(*args) for _ in range(runs)]
    return {k: statistics.median(g[k] for g in got) for k in got[0]}


def main():
    args = sys.argv[1:]
    runs = 1
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 3 or args[0] not in ("tool", "batch", "react", "react_idem"):
        sys.exit(__doc__)
    workload, n, durability = args[0], int(args[1]), args[2]
    allowed = ("normal", "full") + (("memory",) if workload in ("tool", "batch") else ())
    if durability not in allowed:
        sys.exit(f"python_bench: durability {durability!r}: one of {', '.join(allowed)}")
    label = f"weft-py {workload} n={n} durability={durability}"
    tail = f" (median of {runs})" if runs > 1 else ""
    if workload in ("tool", "batch"):
        f = median_of(runs, tool_run if workload == "tool" else batch_run, n, durability)
        d = direct_us(n)
        over = f["us_per_call"] - d
        print(
            f"{label}: us_per_call={f['us_per_call']:.2f} direct_us={d:.3f} "
            f"overhead_us={over:.2f} total_ms={f['total_ms']:.2f}{tail}"
        )
        via = "a plan" if workload == "tool" else "a ReAct agent (one reply, N calls)"
        print(
            f"  {n} Python tool calls through {via} at {durability}: {f['total_ms']:.1f} ms, "
            f"{f['us_per_call']:.1f} us per call; a direct call {d:.3f} us; weft adds "
            f"{over:.1f} us per call"
        )
    else:
        tool = echo_idempotent if workload == "react_idem" else echo
        f = median_of(runs, react_run, n, durability, tool)
        print(
            f"{label}: us_per_iter={f['us_per_iter']:.1f} total_ms={f['total_ms']:.2f} "
            f"setup_ms={f['setup_ms']:.2f} db_mb={f['db_mb']:.3f}{tail}"
        )
        print(
            f"  ReAct agent, {n} iterations at {durability}"
            f"{', the tool idempotent' if workload == 'react_idem' else ''}: {f['total_ms']:.1f} ms, "
            f"{f['us_per_iter']:.0f} us per iteration (agent built in {f['setup_ms']:.1f} ms), "
            f"database {f['db_mb']:.3f} MB"
        )


if __name__ == "__main__":
    main()
