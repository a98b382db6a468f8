"""Typed stubs of weft's native module (the Python API is `weft`; this is what it calls)."""

from typing import Any, Callable, List, Optional, Tuple

class WeftError(Exception): ...

_Given = Tuple[str, Callable[[str, str], str]]

class NativeAgent:
    @staticmethod
    def load(
        db: Optional[str], path: str, text: Optional[str], base: str, tools: List[_Given]
    ) -> "NativeAgent": ...
    @property
    def name(self) -> str: ...
    @property
    def db(self) -> str: ...
    def tool_names(self) -> List[str]: ...
    def run(
        self,
        task: str,
        session: Optional[str] = None,
        id: Optional[str] = None,
        input: Optional[str] = None,
        user: Optional[str] = None,
        reference: Optional[str] = None,
        metadata: Optional[str] = None,
        budget: Optional[str] = None,
        on_event: Optional[Callable[[str], Any]] = None,
    ) -> str: ...
    def resume(
        self, session: str, force: bool = False, on_event: Optional[Callable[[str], Any]] = None
    ) -> str: ...
    def close(self) -> None: ...

def run_plan(
    plan: str,
    tools: List[_Given],
    db: Optional[str] = None,
    agent: Optional[str] = None,
    input: Optional[str] = None,
    id: Optional[str] = None,
    user: Optional[str] = None,
    on_event: Optional[Callable[[str], Any]] = None,
) -> str: ...
def _sandbox() -> int: ...
def _finish() -> None: ...
