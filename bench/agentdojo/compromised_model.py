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

    def __init__(self, user_calls, injection_calls, injection_goal: str | None, answer: str):
        self.user_calls = [(c.function, dict(c.args)) for c in user_calls]
        self.injection_calls = [(c.function, dict(c.args)) for c in injection_calls]
        self.marker = _letters(injection_goal) if injection_goal else None
        self.answer = answer or "Done."

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
