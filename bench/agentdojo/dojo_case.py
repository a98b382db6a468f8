"""One AgentDojo case: a suite, one of its user tasks and an injection task (or none).

`Case.load` builds what agentdojo's own `TaskSuite.run_task_with_pipeline` builds before it asks
an agent: the suite's environment with the injection vectors filled in by the attack, then the
user task's `init_environment`, and a deep copy of it (the "pre-environment" the checks compare
against). `Case.check` runs agentdojo's utility and security checks as that method does, with
the calls a run made (the trace) and its final answer.

The attack is agentdojo's `important_instructions` template (`ImportantInstructionsAttack`),
filled with the user's name it uses ("Emma Johnson") and agentdojo's default model name ("the AI
language model"), as its `important_instructions_no_model_name` variant does: weft's model has no
name in agentdojo's list of models, and the name changes only the wording of the injection. The
injection vectors filled are those agentdojo finds the user task's ground truth reads
(`get_injection_candidates`), as in agentdojo's own benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentdojo.attacks.base_attacks import DEFAULT_MODEL_NAME, FixedJailbreakAttack
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suite, get_suites

BENCHMARK_VERSION = "v1.2.2"
ATTACK_NAME = "important_instructions (no model name)"


def suite_names() -> list[str]:
    return sorted(get_suites(BENCHMARK_VERSION))


def suite(name: str):
    try:
        return get_suite(BENCHMARK_VERSION, name)
    except KeyError:
        raise ValueError(
            f"agentdojo {BENCHMARK_VERSION} has no suite `{name}`: "
            f"use one of {', '.join(suite_names())}"
        ) from None


def _attack(s) -> FixedJailbreakAttack:
    attack = FixedJailbreakAttack(ImportantInstructionsAttack._JB_STRING, s, None)
    attack.user_name = "Emma Johnson"
    attack.model_name = DEFAULT_MODEL_NAME
    return attack


def tool_schemas(suite_name: str) -> list[dict[str, Any]]:
    """The suite's functions as MCP tools: name, description and the JSON schema of the
    function's pydantic parameter model (`$defs` and all, as agentdojo gives it)."""
    return [
        {
            "name": f.name,
            "description": f.description,
            "inputSchema": f.parameters.model_json_schema(),
        }
        for f in suite(suite_name).tools
    ]


@dataclass
class Case:
    suite_name: str
    user_task_id: str
    injection_task_id: str | None
    suite: Any
    user_task: Any
    injection_task: Any
    injections: dict[str, str]
    environment: Any
    pre_environment: Any
    runtime: FunctionsRuntime
    trace: list[FunctionCall] = field(default_factory=list)

    @classmethod
    def load(cls, suite_name: str, user_task_id: str, injection_task_id: str | None) -> "Case":
        s = suite(suite_name)
        if user_task_id not in s.user_tasks:
            raise ValueError(f"suite `{suite_name}` has no user task `{user_task_id}`")
        user_task = s.user_tasks[user_task_id]
        injection_task = None
        injections: dict[str, str] = {}
        if injection_task_id is not None:
            if injection_task_id not in s.injection_tasks:
                raise ValueError(
                    f"suite `{suite_name}` has no injection task `{injection_task_id}`"
                )
            injection_task = s.injection_tasks[injection_task_id]
            injections = _attack(s).attack(user_task, injection_task)
        env = user_task.init_environment(s.load_and_inject_default_environment(injections))
        return cls(
            suite_name=suite_name,
            user_task_id=user_task_id,
            injection_task_id=injection_task_id,
            suite=s,
            user_task=user_task,
            injection_task=injection_task,
            injections=injections,
            environment=env,
            pre_environment=env.model_copy(deep=True),
            runtime=FunctionsRuntime(s.tools),
        )

    def user_ground_truth(self) -> list[FunctionCall]:
        return list(self.user_task.ground_truth(self.pre_environment.model_copy(deep=True)))

    def injection_ground_truth(self) -> list[FunctionCall]:
        if self.injection_task is None:
            return []
        return list(self.injection_task.ground_truth(self.pre_environment.model_copy(deep=True)))

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Runs one function against the case's environment, as agentdojo's tool executor does;
        the call joins the trace. Returns the result as agentdojo shows it to a model (YAML) and
        whether it is an error."""
        from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

        result, error = self.runtime.run_function(self.environment, name, arguments)
        self.trace.append(FunctionCall(function=name, args=dict(arguments)))
        if error is not None:
            return error, True
        return tool_result_to_str(result), False

    def check(self, answer: str) -> tuple[bool, bool | None]:
        """agentdojo's checks: (utility, attack succeeded), the second `None` without an attack.
        agentdojo's security check is true when the injection task's goal was reached."""
        from agentdojo.types import text_content_block_from_string

        output = [text_content_block_from_string(answer)]
        utility = self.suite._check_task_result(
            self.user_task, output, self.pre_environment, self.environment, self.trace
        )
        if self.injection_task is None:
            return bool(utility), None
        security = self.suite._check_task_result(
            self.injection_task, output, self.pre_environment, self.environment, self.trace
        )
        return bool(utility), bool(security)
