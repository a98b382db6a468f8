"""Shared fixtures: each test runs in a temporary directory of its own (its `.weft/weft.db`
there), and writes the scripted model's replies it needs."""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

# In CI no test may be skipped for want of a service (scripts/test sets them all).
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def service(var: str) -> str:
    """The value of a service's variable; without it the test is skipped (visibly), or fails in CI."""
    value = os.environ.get(var)
    if not value:
        if IN_CI:
            pytest.fail(f"CI is set and {var} is not; in CI no service test may be skipped")
        pytest.skip(f"{var} is not set")
    return value


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WEFT_DB", raising=False)
    yield tmp_path


def write_script(path, replies):
    """A scripted model's replies (weft's `scripted:PATH`), as JSON (which YAML reads)."""
    with open(path, "w") as f:
        json.dump(replies, f)
    return f"scripted:{path}"


def calls(*pairs):
    """One reply calling each (tool, arguments) pair."""
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}


@pytest.fixture
def script(in_tmp):
    def make(replies, name="script.json"):
        return write_script(os.path.join(in_tmp, name), replies)

    return make


def run_python(code: str, *args: str, timeout: float = 120, **kw):
    """Runs Python code in a new interpreter (the same one the tests run in)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, **kw
    )
