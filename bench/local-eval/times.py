#!/usr/bin/env python3
"""Time per call by backend, reply kind and agent, from the JSON files of
`weft-bench local-eval --out FILE` (calls that failed are left out).

    python3 bench/local-eval/times.py local.json server.json
"""
import json
import statistics
import sys
from collections import defaultdict


def main(paths):
    rows = defaultdict(list)
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["records"]:
                if r.get("error"):
                    continue
                rows[(r["kind"], r["agent"], r["backend"])].append(r)
    print("| replies | agent | backend | calls | median s/call | mean input tokens | mean output tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (kind, agent, backend), rs in sorted(rows.items()):
        print(
            f"| {kind} | {agent} | {backend} | {len(rs)} "
            f"| {statistics.median(r['ms'] for r in rs) / 1000:.2f} "
            f"| {statistics.mean(r['input_tokens'] for r in rs):.0f} "
            f"| {statistics.mean(r['output_tokens'] for r in rs):.0f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: times.py RESULTS.json [MORE.json ...]")
    main(sys.argv[1:])
