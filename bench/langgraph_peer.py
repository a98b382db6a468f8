"""The LangGraph peer at a chosen durability, with its storage measured as weft's is.

    python langgraph_peer.py SYNC WORKLOAD ARGS...

SYNC is `full` or `normal`: every SQLite connection the peer script opens (sqlite3 and aiosqlite)
gets `PRAGMA synchronous=FULL` or `NORMAL` (LangGraph's checkpointer sets the WAL journal
itself), read back when it is opened and printed after the run (2 FULL, 1 NORMAL). WORKLOAD is one of the peer script's (`react N
SAVER`, `concurrent M K`, `growth T`), or `react_tool N TOOL`: the peer's react run with its
`echo` tool replaced by `ledger` (an in-process tool that appends to a list) or `command` (a
`sh -c cat` process per call), as weft-bench's `react --tool` does.

After the run, each database the peer created is checkpointed (`wal_checkpoint(TRUNCATE)`), as
weft-bench does before it measures, and a line gives the database file plus its write-ahead log:
`peer storage: sync=N db_mb=X`.

The peer script is ../shared/bench/langgraph_bench.py beside the repository, or
$LANGGRAPH_BENCH.
"""
import importlib.util
import os
import sqlite3
import subprocess
import sys
import tempfile

SYNC = {"full": "FULL", "normal": "NORMAL"}


def load_peer():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("LANGGRAPH_BENCH") or os.path.join(
        here, "..", "..", "shared", "bench", "langgraph_bench.py"
    )
    spec = importlib.util.spec_from_file_location("langgraph_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in SYNC:
        sys.exit("usage: langgraph_peer.py full|normal WORKLOAD ARGS...")
    pragma = SYNC[sys.argv[1]]
    workload, args = sys.argv[2], sys.argv[3:]

    # Every connection the peer opens, synchronous as asked (aiosqlite opens through
    # sqlite3.connect too).
    connect = sqlite3.connect
    in_effect = set()

    def connect_at(*a, **kw):
        conn = connect(*a, **kw)
        conn.execute(f"PRAGMA synchronous={pragma}")
        in_effect.add(conn.execute("PRAGMA synchronous").fetchone()[0])
        return conn

    sqlite3.connect = connect_at
    # The temporary directories the peer makes its databases in.
    mkdtemp = tempfile.mkdtemp
    dirs = []

    def mkdtemp_seen(*a, **kw):
        d = mkdtemp(*a, **kw)
        dirs.append(d)
        return d

    tempfile.mkdtemp = mkdtemp_seen

    peer = load_peer()
    if workload == "react":
        peer.react(int(args[0]), args[1])
    elif workload == "concurrent":
        peer.concurrent(int(args[0]), int(args[1]))
    elif workload == "growth":
        peer.growth(int(args[0]))
    elif workload == "react_tool":
        react_tool(peer, int(args[0]), args[1])
    else:
        sys.exit(f"unknown workload {workload}")

    total = 0
    for d in dirs:
        for name in os.listdir(d):
            if name.endswith(".db"):
                c = connect(os.path.join(d, name))
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                c.close()
        for name in os.listdir(d):
            if name.endswith(".db") or name.endswith(".db-wal"):
                total += os.path.getsize(os.path.join(d, name))
    sync = ",".join(str(s) for s in sorted(in_effect)) or "-"
    print(f"peer storage: sync={sync} db_mb={total / 1e6:.3f}")


def react_tool(peer, n, tool):
    """The peer's `react N sqlite` with another tool under the name `echo`."""
    import time
    from langchain_core.tools import tool as as_tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.prebuilt import create_react_agent

    ledger = []
    if tool == "ledger":
        @as_tool
        def echo(text: str) -> str:
            """Record the text in a ledger."""
            ledger.append(text)
            return f'{{"entry": {len(ledger)}, "text": "{text}"}}'
    elif tool == "command":
        @as_tool
        def echo(text: str) -> str:
            """Echo the text back, through a process."""
            return subprocess.run(
                ["sh", "-c", "cat"], input=f'{{"text": "{text}"}}', capture_output=True,
                text=True, check=True,
            ).stdout
    else:
        sys.exit(f"unknown tool {tool}")
    d = tempfile.mkdtemp()
    cp = SqliteSaver(sqlite3.connect(os.path.join(d, "cp.db"), check_same_thread=False))
    agent = create_react_agent(peer.Scripted(calls=n), [echo], checkpointer=cp)
    cfg = {"configurable": {"thread_id": "t1"}, "recursion_limit": 4 * n + 10}
    t = time.perf_counter()
    out = agent.invoke({"messages": [("user", "go")]}, cfg)
    dt = time.perf_counter() - t
    assert out["messages"][-1].content == "done"
    print(f"langgraph react n={n} saver=sqlite tool={tool}: {dt*1e3:.1f} ms total, {dt/n*1e6:.0f} us/iteration")


if __name__ == "__main__":
    main()
