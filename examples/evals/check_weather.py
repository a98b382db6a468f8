#!/usr/bin/env python3
"""A command scorer for weather-chat's cases: the session's JSON on stdin, a verdict on stdout.

Passes when the city the answer calls sunnier ("X is sunnier") is one that getWeather reported
as sunny in this session.
"""
import json
import re
import sys

session = json.load(sys.stdin)
answer = session["observed"].get("answer") or ""
sunny = set()
for e in session["events"]:
    if e.get("type") != "tool_call_finished":
        continue
    outcome = e.get("outcome", {})
    result = outcome.get("output") if outcome.get("status") == "ok" else None
    if isinstance(result, dict) and result.get("sunny"):
        sunny.add(result["city"].lower())
m = re.search(r"(\w+) is sunnier", answer)
if not m:
    print(json.dumps({"pass": False, "reason": f"the answer names no sunnier city: {answer!r}"}))
elif m.group(1).lower() in sunny:
    print(json.dumps({"pass": True, "reason": f"{m.group(1)} was reported sunny"}))
else:
    print(json.dumps({"pass": False, "reason": f"{m.group(1)} was not reported sunny (sunny: {sorted(sunny)})"}))
