#!/usr/bin/env python3
"""Why the engine refused the planner replies it refused, by backend, from the JSON files of
`weft-bench local-eval --out FILE` (a plan can have several reasons; each is counted once per
plan).

    python3 bench/local-eval/refusals.py bench/local-eval/results/2026-11-26/local.json
"""
import json
import sys
from collections import Counter, defaultdict

# A reason, and a phrase of the engine's message (crates/weft-core: plan.rs, graph.rs) that names it.
REASONS = [
    ("malformed reference", "a reference starts with"),
    ("duplicate step id", "duplicate id"),
    ("†item outside a fan-out step", "is read only in a step with `_forEach`"),
    ("input key not given", "is not in the input"),
    ("State path no step writes", "is written by no step"),
    ("unknown step", "names unknown step"),
]


def main(paths):
    refused = defaultdict(int)
    reasons = defaultdict(Counter)
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["records"]:
                problem = r["score"].get("problem") or ""
                if r["kind"] != "planner" or not problem.startswith("plan rejected"):
                    continue
                refused[r["backend"]] += 1
                named = {name for name, phrase in REASONS if phrase in problem}
                for name in named or {"other"}:
                    reasons[r["backend"]][name] += 1
    for backend, n in refused.items():
        print(f"{backend}: {n} plans refused")
        for name, count in reasons[backend].most_common():
            print(f"  {count:3}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
