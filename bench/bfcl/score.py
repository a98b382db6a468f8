#!/usr/bin/env python3
"""Scores the calls `weft-bench bfcl` wrote (JSON lines) with BFCL's own AST checker
(`bfcl_eval.eval_checker.ast_eval.ast_checker`, Python, the category's checker) against BFCL's
possible answers, and prints a Markdown table per model, backend and category: questions,
replies that call a function (or begin to: `<tool_call>` in the text), well-formed replies (at
least one call, and every call names an offered function with arguments its parameters
accept), calls that are not well formed among the replies that call, and AST accuracy (the
checker's `valid`). With --json FILE the figures are written as JSON too.

    $WEFT_BFCL_PYTHON bench/bfcl/score.py RESULTS.jsonl [--json FIGURES.json]

The checker is asked as for an OpenAI function-calling model (`gpt-4o-2024-11-20-FC`), whose
entry says that `.` in a function name is written `_`, as prepare.py offered them.
"""
import argparse
import importlib
import json
import os
import sys
import types
from collections import OrderedDict

CHECKER_MODEL = "gpt-4o-2024-11-20-FC"
FILES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
}


def bfcl():
    """Imports bfcl_eval. Its package imports, for categories and models this benchmark does not
    use, modules that are not installed (retrieval: sentence_transformers, faiss; a Qwen agent):
    empty stand-ins are put in their place, which fail only if something is taken from them."""
    for name in ("sentence_transformers", "faiss", "qwen_agent", "qwen_agent.llm"):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            m = types.ModuleType(name)
            m.__path__ = []

            def missing(attr, name=name):
                if attr.startswith("__"):
                    raise AttributeError(attr)
                return type(attr, (), {"__init__": lambda self, *a, **k: (_ for _ in ()).throw(
                    ImportError(f"{name}.{attr} is a stand-in (not installed)"))})

            m.__getattr__ = missing
            sys.modules[name] = m
    return importlib.import_module("bfcl_eval")


def load(path):
    with open(path) as f:
        return {r["id"]: r for r in (json.loads(line) for line in f if line.strip())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--json")
    a = ap.parse_args()
    pkg = bfcl()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    data = os.path.join(os.path.dirname(pkg.__file__), "data")
    questions, answers = {}, {}
    for cat, name in FILES.items():
        questions.update(load(os.path.join(data, name)))
        answers.update(load(os.path.join(data, "possible_answer", name)))

    figures = OrderedDict()
    for path in a.results:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                key = (r["model"], r["backend"], r["category"])
                fig = figures.setdefault(key, {"questions": 0, "calling": 0, "well_formed": 0, "ast": 0,
                                               "seconds": 0.0, "errors": {}})
                fig["questions"] += 1
                fig["seconds"] += r["ms"] / 1000
                fig["well_formed"] += bool(r["well_formed"])
                fig["calling"] += bool(r.get("attempted_call", bool(r["calls"]) or "<tool_call>" in r["text"]))
                output = [{c["name"]: c["arguments"]} for c in r["calls"]]
                q = questions[r["id"]]
                if not output:
                    verdict = {"valid": False, "error_type": "no_call"}
                else:
                    try:
                        verdict = ast_checker(q["function"], output, answers[r["id"]]["ground_truth"],
                                              Language.PYTHON, r["id"].rsplit("_", 1)[0], CHECKER_MODEL)
                    except Exception as e:  # the checker's own failure on odd output counts as wrong
                        verdict = {"valid": False, "error_type": f"checker raised {type(e).__name__}"}
                if verdict["valid"]:
                    fig["ast"] += 1
                else:
                    kind = verdict.get("error_type", "unknown")
                    fig["errors"][kind] = fig["errors"].get(kind, 0) + 1

    print("| model | backend | category | questions | replies calling | well formed | calling, not well formed | AST accurate | mean s/question |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for (model, backend, cat), f in figures.items():
        n = f["questions"]
        pct = lambda k: f"{k} ({100 * k / n:.0f}%)"
        bad = f["calling"] - f["well_formed"]
        print(f"| {model} | {backend} | {cat} | {n} | {pct(f['calling'])} | {pct(f['well_formed'])} | {bad} | "
              f"{pct(f['ast'])} | {f['seconds'] / n:.2f} |")
        rows.append({"model": model, "backend": backend, "category": cat, **f})
    print()
    for r in rows:
        top = sorted(r["errors"].items(), key=lambda kv: -kv[1])[:4]
        print(f"{r['model']} {r['backend']} {r['category']}: " + ", ".join(f"{k} {v}" for k, v in top))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
