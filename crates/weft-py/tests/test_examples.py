"""The examples of docs/python.md (examples/python), run as the page says."""

import os
import subprocess
import sys

from conftest import ROOT

EXAMPLES = os.path.join(ROOT, "examples", "python")


def example(*args, check=True):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, args[0]), *args[1:]],
                         capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_first_agent():
    out = example("first_agent.py", "Where is it sunnier, Lisbon or Oslo?").stdout.splitlines()
    assert out[:3] == [
        "call  get_weather({'city': 'Lisbon'})",
        "call  get_weather({'city': 'Oslo'})",
        "call  to_fahrenheit({'celsius': 24})",
    ]
    assert out[3] == "Lisbon is sunnier: 24°C (75.2°F) and sunny, while Oslo is cloudy at 12°C."
    assert out[4].endswith("3 tool calls, kept in .weft/weft.db")
    assert os.path.exists(".weft/weft.db")


def test_plan():
    assert example("plan.py").stdout == "completed {'apple': 1.5, 'pear': 2.0, 'total': 3.5}\n"


def test_approval_answered_later():
    asked = example("approval.py", "ask", "refund-17").stdout.splitlines()
    assert asked[0].startswith("waiting: Allow the call refund")
    assert asked[1].endswith("answer refund-17")
    assert example("approval.py", "answer", "refund-17").stdout == "completed: Order o-17 is refunded: 25 euros.\n"


def test_crash_and_resume():
    died = example("crash.py", "run", "order-9", check=False)
    assert died.returncode == -9, (died.returncode, died.stderr)
    assert "the process dies" in died.stdout
    resumed = example("crash.py", "resume", "order-9").stdout
    assert resumed.startswith("completed: Order o-9: the charge may or may not have gone through")
