"""Durability from Python: a process killed mid-call and resumed from a new one (no call
repeated), many sessions at once, and the same on PostgreSQL."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import weft
from conftest import calls, service, write_script

PROGRAM = '''
import os, sys, time, weft

@weft.tool
def charge(order: str) -> str:
    """Charges an order (not idempotent)."""
    with open("charges.log", "a") as f:
        f.write(order + "\\n")
    if os.environ.get("HANG") == "1":
        time.sleep(60)
    return "charged " + order

@weft.tool(idempotent=True)
def look(order: str) -> str:
    """Looks an order up (idempotent)."""
    with open("looks.log", "a") as f:
        f.write(order + "\\n")
    if os.environ.get("HANG") == "1":
        time.sleep(60)
    return "found " + order

agent = weft.Agent("shop", model="scripted:s.json", mode="react", instructions="x",
                   tools=[charge, look], db=sys.argv[1])
if sys.argv[2] == "run":
    r = agent.run("charge o1", id=sys.argv[3])
else:
    r = agent.resume(sys.argv[3])
print(r.status, r.answer, r.tool_calls)
'''


def kill_mid_call_and_resume(db, session):
    write_script("s.json", [calls(("charge", {"order": "o1"}), ("look", {"order": "o1"})), {"text": "done"}])
    with open("prog.py", "w") as f:
        f.write(PROGRAM)
    env = dict(os.environ, HANG="1")
    p = subprocess.Popen([sys.executable, "prog.py", db, "run", session], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (os.path.exists("charges.log") and os.path.exists("looks.log")):
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline, "the calls never started"
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    # A new process resumes: the idempotent call runs again, the other is an unknown outcome.
    env["HANG"] = "0"
    events = []
    code = f'''
import sys, json, weft
sys.argv = ["prog.py", {db!r}, "resume", {session!r}]
exec(open("prog.py").read().replace("r = agent.resume(sys.argv[3])",
     "r = agent.resume(sys.argv[3], on_event=lambda e: print('EVENT', json.dumps([e.type, e.data])))"))
'''
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    status = lines[-1].split()
    events = [l for l in lines if l.startswith("EVENT")]
    return status, events


def test_a_killed_process_resumes_in_a_new_one_without_repeating_a_call():
    status, events = kill_mid_call_and_resume(".weft/weft.db", "crash-1")
    assert status[0] == "completed", status
    # The charge ran once: after the crash it is an unknown outcome, never run twice.
    assert open("charges.log").read() == "o1\n"
    assert any('"unknown_outcome"' in e for e in events), events
    # The lookup is idempotent: it ran again.
    assert open("looks.log").read() == "o1\no1\n"


def test_a_killed_process_resumes_on_postgresql():
    url = service("WEFT_TEST_POSTGRES_URL")
    session = f"py-crash-{os.getpid()}-{time.time_ns()}"
    status, events = kill_mid_call_and_resume(url, session)
    assert status[0] == "completed", status
    assert open("charges.log").read() == "o1\n"
    assert any('"unknown_outcome"' in e for e in events), events


def test_a_thousand_tool_calls_from_a_hundred_sessions_at_once(in_tmp):
    counted = []

    @weft.tool
    async def tick(n: int) -> int:
        """Counts."""
        counted.append(n)
        await asyncio.sleep(0)
        return n

    @weft.tool
    def tock(n: int) -> int:
        """Counts, blocking."""
        counted.append(n)
        return n

    replies = [calls(("tick", {"n": i}), ("tock", {"n": i})) for i in range(5)] + [{"text": "done"}]
    model = write_script("s.json", replies)
    agent = weft.Agent("many", model=model, mode="react", instructions="x", tools=[tick, tock],
                       limits={"max_iterations": 10}, durability="normal")

    async def main():
        return await asyncio.gather(*(agent.arun(f"task {i}") for i in range(100)))

    results = asyncio.run(main())
    assert all(r.completed for r in results), [r for r in results if not r.completed][:3]
    assert len({r.session_id for r in results}) == 100
    assert sum(r.tool_calls for r in results) == 1000
    assert len(counted) == 1000


def test_ctrl_c_stops_a_run_at_a_safe_point_and_resume_goes_on_without_repeating():
    write_script("s.json", [calls(("slow", {"n": i})) for i in range(3)] + [{"text": "done"}])
    program = '''
import signal, sys, time, weft

# A process started in the background inherits SIGINT ignored (as CI's may be); this one is a
# program in a terminal, where Ctrl-C raises KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)

@weft.tool
def slow(n: int) -> int:
    """Takes a while (not idempotent)."""
    with open("slow.log", "a") as f:
        f.write(f"{n}\\n")
    time.sleep(1.0)
    return n

agent = weft.Agent("slowpoke", model="scripted:s.json", mode="react", instructions="x", tools=[slow])
if sys.argv[1] == "run":
    try:
        agent.run("go")
    except weft.Interrupted as e:
        print("interrupted", e.session_id, flush=True)
        sys.exit(130)
else:
    r = agent.resume(sys.argv[2])
    print(r.status, r.answer, r.tool_calls)
'''
    with open("slow.py", "w") as f:
        f.write(program)
    p = subprocess.Popen([sys.executable, "slow.py", "run"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists("slow.log"):
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline, "the first call never started"
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    word, session = out.split()
    assert word == "interrupted"
    # The call in flight had its grace to finish; the run stopped before the next one.
    assert open("slow.log").read() == "0\n"
    resumed = subprocess.run([sys.executable, "slow.py", "resume", session],
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == ["completed", "done", "2"], resumed.stdout
    # Each call ran once: the one in flight at Ctrl-C was recorded, not run again.
    assert open("slow.log").read() == "0\n1\n2\n"
