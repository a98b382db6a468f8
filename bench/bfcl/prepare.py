#!/usr/bin/env python3
"""Writes BFCL questions as the JSON lines `weft-bench bfcl` reads: from `bfcl-eval`'s own data
files, the first N questions (or all) of each category asked for, each with its functions
converted by BFCL's own converter for a function-calling model (`convert_to_tool`, OpenAI style:
BFCL's types as JSON Schema's, `.` in a name written `_`), as BFCL's handlers for such models do.

    $WEFT_BFCL_PYTHON bench/bfcl/prepare.py --categories simple,multiple,parallel --limit 50 OUT.jsonl

Categories: simple (BFCL_v4_simple_python, 400 questions), multiple (200), parallel (200).
"""
import argparse
import json
import os
import sys

from score import bfcl  # the stand-ins the package's imports need

FILES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--categories", default="simple,multiple,parallel")
    ap.add_argument("--limit", type=int, default=0, help="questions per category (0: all)")
    ap.add_argument("out")
    a = ap.parse_args()
    pkg = bfcl()
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.model_handler.utils import convert_to_tool

    data = os.path.join(os.path.dirname(pkg.__file__), "data")
    n = 0
    with open(a.out, "w") as out:
        for cat in a.categories.split(","):
            if cat not in FILES:
                sys.exit(f"prepare.py: --categories: unknown category `{cat}`; give {', '.join(FILES)}")
            with open(os.path.join(data, FILES[cat])) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            if a.limit:
                rows = rows[: a.limit]
            for row in rows:
                turn = row["question"][0]
                users = [m["content"] for m in turn if m["role"] == "user"]
                if len(users) != 1 or len(turn) != 1:
                    sys.exit(f"prepare.py: {row['id']}: expected one user message, found {turn}")
                tools = [t.get("function", t) for t in convert_to_tool(
                    row["function"], GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)]
                out.write(json.dumps({
                    "id": row["id"],
                    "category": cat,
                    "question": users[0],
                    "tools": [{"name": t["name"], "description": t.get("description", ""),
                               "parameters": t["parameters"]} for t in tools],
                }) + "\n")
                n += 1
    print(f"prepare.py: {n} questions written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
