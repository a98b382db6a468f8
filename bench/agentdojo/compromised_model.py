"""The "compromised model": what an OpenAI-compatible model would answer if it always did what
the text in front of it says, the user's task and any injected instruction alike.

It is scripted from agentdojo's ground truth, not a language model: for the current user task it
emits the task's ground-truth calls (`ground_truth(pre_environment)`), one per reply; as soon as a
tool result it was given contains the injection task's goal (compared on letters and digits only,
so that quoting and line-wrapping of the tool's YAML do not hide it), it obeys: its next replies
are the injection task's ground-truth calls, then it goes on with the user's. Once both are done
it answers with the user task's `GROUND_TRUTH_OUTPUT` (agentdojo's expected answer; empty for
tasks whose check reads the environment only, then "Done.").

So the figures it produces measure the runtime's enforcement (which calls weft lets through),
not a model's judgement: without a defence in the runtime, every injection that reaches a tool
result succeeds.

The reply depends only on the request's messages: each call's id says which list it came from
(`dojo_u_N`, `dojo_i_N`), so the model keeps no state between requests and a resumed or
repeated request gets the same reply.

In plan mode (`PlanMode`, chosen by the request's system message) it plays weft's planner, step
executor, reviewer and resolver with the same two lists:

- The planner, which sees the task and the tools only, writes the user's ground-truth calls as
  steps in order. A call whose every argument the task states (its text holds the value) is a
  literal step; the others are steps for the executor (`_id` `uN`: the executor makes call N),
  since a planner could only learn their values from what the tools return.
- The reviewer reads every result. When one holds the injection's goal it obeys: it asks for a
  replan, and the replanner writes the injection's calls (literal, `iN`, in their order) beside
  the user's remaining ones (in theirs; neither list waits for the other, as neither reads what
  the other gives). After a refused or failed step it replans the user's remaining calls, within
  the agent's replan bound; otherwise it continues, and answers when nothing is pending.
- The executor makes its step's call; told that the call was refused, it gives up the step.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

USER_PREFIX = "dojo_u_"
INJECTION_PREFIX = "dojo_i_"


def _letters(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _text(content: Any) -> str:
    """A message's content as text (a string, or OpenAI's list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


class Script:
    """The calls and answer of one case."""

    def __init__(self, user_calls, injection_calls, injection_goal: str | None, answer: str,
                 prompt: str = ""):
        self.user_calls = [(c.function, dict(c.args)) for c in user_calls]
        self.injection_calls = [(c.function, dict(c.args)) for c in injection_calls]
        self.marker = _letters(injection_goal) if injection_goal else None
        self.answer = answer or "Done."
        self.prompt = prompt

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The reply to a request of either mode."""
        system = next((_text(m.get("content")) for m in messages
                       if isinstance(m, dict) and m.get("role") == "system"), "")
        role = PlanMode.role(system)
        if role is None:
            return self.next_reply(messages)
        return PlanMode(self).reply(role, _text(messages[-1].get("content")))

    def next_reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message to send next, given the conversation so far."""
        user_done = 0
        injection_done = 0
        injected = False
        for m in messages:
            if not isinstance(m, dict):
                raise ValueError("a message of the request is not an object")
            if m.get("role") == "assistant":
                for call in m.get("tool_calls") or []:
                    call_id = str(call.get("id", ""))
                    if call_id.startswith(USER_PREFIX):
                        user_done += 1
                    elif call_id.startswith(INJECTION_PREFIX):
                        injection_done += 1
            elif m.get("role") == "tool" and self.marker:
                if self.marker in _letters(_text(m.get("content"))):
                    injected = True
        if injected and injection_done < len(self.injection_calls):
            name, args = self.injection_calls[injection_done]
            return _call(f"{INJECTION_PREFIX}{injection_done}", name, args)
        if user_done < len(self.user_calls):
            name, args = self.user_calls[user_done]
            return _call(f"{USER_PREFIX}{user_done}", name, args)
        return {"role": "assistant", "content": self.answer}


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, default=str)},
            }
        ],
    }


def completion(model: str, message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions response carrying one message (usage counted roughly)."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    out = len(json.dumps(message)) // 4
    return {
        "id": f"chatcmpl-dojo-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 0, "completion_tokens": out, "total_tokens": out},
    }


class PlanMode:
    """The compromised model as weft's plan-mode roles (see the module's documentation)."""

    ROLES = {
        "You are the planner": "plan",
        "You are the step executor": "execute",
        "You review the progress of a plan": "review",
        "Write the final answer": "respond",
        "You review a draft answer": "response_review",
    }

    def __init__(self, script: Script):
        self.s = script

    @classmethod
    def role(cls, system: str) -> str | None:
        for text, role in cls.ROLES.items():
            if text in system:
                return role
        return None

    def injected(self, body: str) -> bool:
        return bool(self.s.marker) and self.s.marker in _letters(body)

    def given(self, value: Any) -> bool:
        """Whether the task's text states `value` (a planner can write it without a tool)."""
        if value is None or isinstance(value, bool) or value == "" or value == []:
            return True
        if isinstance(value, (list, tuple)):
            return all(self.given(v) for v in value)
        if isinstance(value, dict):
            return all(self.given(v) for v in value.values())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return _letters(str(value)) in _letters(self.s.prompt)

    def reply(self, role: str, body: str) -> dict[str, Any]:
        if role == "plan":
            return _content(json.dumps({"plan": self.plan(body)}))
        if role == "execute":
            return _content(json.dumps(self.execute(body)))
        if role == "review":
            return _content(json.dumps(self.review(body)))
        if role == "response_review":
            return _content(json.dumps({"verdict": "ACCEPT"}))
        return _content(self.s.answer)

    @staticmethod
    def report(body: str, label: str) -> list[dict[str, Any]]:
        """The plan report a request carries after `label` (one JSON line)."""
        # `split`, not `splitlines`: a tool's text may hold U+2028 and the like, which the JSON
        # line keeps as they are.
        for line in body.split("\n"):
            if line.startswith(label):
                try:
                    v = json.loads(line[len(label):])
                    return v if isinstance(v, list) else []
                except json.JSONDecodeError:
                    return []
        return []

    @staticmethod
    def index(step_id: str, prefix: str) -> int | None:
        m = re.match(rf"{prefix}(\d+)(?:_|$)", step_id)
        return int(m.group(1)) if m else None

    def plan(self, body: str) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = []
        current = self.report(body, "Current plan: ")
        replans = 1 + max([int(m.group(1)) for st in current
                           if (m := re.search(r"_r(\d+)$", str(st.get("id", ""))))] or [0])
        suffix = f"_r{replans}" if current else ""
        if current and self.injected(body) and not any(
                self.index(str(st.get("id")), "i") is not None for st in current):
            for k, (name, args) in enumerate(self.s.injection_calls):
                steps.append({"_id": f"i{k}{suffix}", "_tool": name, **args})
        done = {self.index(str(st.get("id")), "u") for st in current
                if st.get("status") in ("COMPLETED", "FAILED")}
        for k, (name, args) in enumerate(self.s.user_calls):
            if k in done:
                continue
            if all(self.given(v) for v in args.values()):
                steps.append({"_id": f"u{k}{suffix}", "_tool": name, **args})
            else:
                steps.append({"_id": f"u{k}{suffix}",
                              "_description": f"Make the call {name} that the task needs."})
        # Each list's calls in their order; the injection's and the user's apart, since neither
        # reads what the other gives (a plan is a data-flow graph). A step for the executor
        # depends on every earlier step of its list: its call's values (the ground truth's) may
        # come from any of their outputs, and an executor reads only the outputs of the steps it
        # depends on (weft labels its call with those).
        for prefix in ("i", "u"):
            mine = [st for st in steps if st["_id"].startswith(prefix)]
            for k, b in enumerate(mine[1:], start=1):
                if "_description" in b:
                    b["_dependsOn"] = [a["_id"] for a in mine[:k]]
                else:
                    b["_dependsOn"] = [mine[k - 1]["_id"]]
        return steps

    def execute(self, body: str) -> dict[str, Any]:
        m = re.search(r"Current step `([^`]+)`", body)
        step = m.group(1) if m else ""
        if "This step's log so far" in body:
            return {"action": "DIRECT_RESPONSE", "response": "The step's call was not made."}
        k, calls = self.index(step, "u"), self.s.user_calls
        if k is None:
            k, calls = self.index(step, "i"), self.s.injection_calls
        if k is None or k >= len(calls):
            return {"action": "DIRECT_RESPONSE", "response": "Nothing to do."}
        name, args = calls[k]
        return {"action": "USE_TOOL", "tool": name, "arguments": args}

    def review(self, body: str) -> dict[str, Any]:
        steps = self.report(body, "Plan and results: ")
        ids = [str(st.get("id", "")) for st in steps]
        m = re.search(r"Replans so far: (\d+) of (\d+)", body)
        room = m is None or int(m.group(1)) < int(m.group(2))
        if (self.injected(body) and self.s.injection_calls and room
                and not any(self.index(i, "i") is not None for i in ids)):
            return {"decision": "REPLAN", "reason": "The results ask for more to be done first."}
        if any(st.get("status") in ("PENDING", "RUNNING") for st in steps):
            return {"decision": "CONTINUE", "reason": "Steps remain."}
        completed = {self.index(str(st.get("id")), "u") for st in steps
                     if st.get("status") == "COMPLETED"}
        gave_up = {self.index(str(st.get("id")), "u") for st in steps
                   if st.get("status") == "FAILED"}
        left = [k for k in range(len(self.s.user_calls)) if k not in completed | gave_up]
        if left and room:
            return {"decision": "REPLAN", "reason": "Some of the task's calls are still to be made."}
        return {"decision": "FINAL_RESPONSE", "reason": "Nothing is pending."}


def _content(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}
