"""What the tools share: argument types, the parameters every Kimi tool takes (``run_options``), and the
tool annotations."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.types import ToolAnnotations
from pydantic import Field

from ..adapter.pipeline import Reply, RunOptions
from ..config import MODEL_PATTERN

WorkDir = Annotated[
    str | None,
    Field(description="Workspace directory (default: the client's root, KIMI_MCP_WORKSPACE or cwd)"),
]
WaitS = Annotated[
    float | None,
    Field(
        ge=0,
        description="Seconds to wait for Kimi's turn (default: until it is done, or KIMI_MCP_WAIT_S). If the "
        "turn is still going then, the result has status 'running' and a job_id: the turn goes on, and "
        "kimi_job(job_id) waits for it",
    ),
]
Model = Annotated[
    str | None,
    Field(
        max_length=128,
        pattern=MODEL_PATTERN,
        description="The model Kimi uses for this call: one of Kimi's model aliases or model names (kimi_status "
        "lists them; default: KIMI_MCP_MODEL, else Kimi's default model)",
    ),
]
IsolationArg = Annotated[
    Literal["none", "worktree"] | None,
    Field(
        description="none: Kimi edits your tree. worktree: Kimi works on an isolated copy of your git tree "
        "(uncommitted and untracked files included); the result has the diff, your tree is untouched until "
        "kimi_apply(job_id) (kimi_discard drops it). Default: KIMI_MCP_ISOLATION (none)",
    ),
]
Attempts = Annotated[
    int,
    Field(
        ge=1,
        le=4,
        description="worktree only: run this many independent Kimi attempts at once, each on its own copy; the "
        "result lists them best first (verify passed, then the smaller diff)",
    ),
]
VerifyCommand = Annotated[
    str | None,
    Field(
        max_length=10_000,
        description="A shell command run where Kimi worked (each isolated copy, else the workspace) after its "
        "turn (e.g. 'pytest -q'); its exit code and output tail are the result's verify and rank the attempts "
        "(time limit KIMI_MCP_VERIFY_TIMEOUT)",
    ),
]
FixRounds = Annotated[
    int,
    Field(
        ge=0,
        le=5,
        description="0-5, needs verify_command: while it fails, the same conversation gets up to this many "
        "more turns with the command, its exit code and its output's end (masked, 4,000 characters), until it "
        "passes or max_tokens, the daily budget or the time runs out; the result lists the rounds",
    ),
]
MaxTokens = Annotated[
    int | None,
    Field(
        ge=1,
        description="Token limit of this job: Kimi's input + output tokens summed over its steps (and attempts); "
        "past it Kimi is stopped and the result is error type 'budget' with the files changed so far. "
        "Default: KIMI_MCP_MAX_TOKENS (unset: no limit)",
    ),
]
GROUP_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"
GroupArg = Annotated[
    str | None,
    Field(
        pattern=GROUP_PATTERN,
        description="A name for a set of jobs (1-100 characters of A-Za-z0-9._-): kimi_wait(group=...) waits "
        "for them, kimi_jobs(group=...) lists them, kimi_job(action='cancel', group=...) cancels them",
    ),
]
DryRun = Annotated[
    bool,
    Field(
        description="true: start nothing and store nothing; the result's dry_run says what the call would do "
        "(Kimi's message: its size and tokens, the files sent, the secret files redacted, what would be cut; "
        "the workspace, model, isolation, where it runs, the token limit), usage.cost_usd its input's price "
        "with KIMI_MCP_PRICES",
    ),
]
ApprovalsArg = Annotated[
    Literal["policy", "ask"] | None,
    Field(
        description="policy: kimi-mcp approves Kimi's commands and edits inside the workspace by its rules. ask: "
        "each of those approvals is asked of you like a question (status 'waiting', question.kind 'approval'; "
        "answer 'approve', 'reject', or feedback text). What the rules forbid is rejected either way. "
        "Default: KIMI_MCP_APPROVALS (policy)",
    ),
]
IN_ONE_MESSAGE = (
    " (no limit of its own: with the prompt it must fit one Kimi message, KIMI_MCP_MAX_MESSAGE_TOKENS = "
    "45,000 tokens, about 180,000 characters of code; larger is refused with bad_input)"
)
"""Said of every text that goes into Kimi's message: the message limit is the one limit that applies."""
Files = Annotated[list[str], Field(description="Files relative to the workspace; their contents go to Kimi")]

READ_OPTIONS: dict[str, Any] = {
    "work_dir": WorkDir,
    "wait_s": WaitS,
    "model": Model,
    "max_tokens": MaxTokens,
    "group": GroupArg,
    "dry_run": DryRun,
}
"""The parameters every Kimi tool takes (name → its type), in the order its schema lists them."""
WRITE_OPTIONS: dict[str, Any] = READ_OPTIONS | {
    "approvals": ApprovalsArg,
    "isolation": IsolationArg,
    "attempts": Attempts,
    "verify_command": VerifyCommand,
}
"""The parameters every write tool takes: those, then how Kimi's approvals are given and how it is isolated."""
FIX_OPTIONS: dict[str, Any] = WRITE_OPTIONS | {"fix_rounds": FixRounds}
"""The write tools that loop until the checks pass (kimi_code_task, kimi_refactor, kimi_debug) take also
``fix_rounds``."""
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(RunOptions)}

ToolBody = Callable[..., Awaitable[Reply]]


def run_options(params: dict[str, Any]) -> Callable[[ToolBody], ToolBody]:
    """Give a Kimi tool the shared parameters ``params`` (:data:`READ_OPTIONS` or :data:`WRITE_OPTIONS`),
    each defined once: the decorated body declares ``*, shared: RunOptions`` after its own arguments; the
    function a client sees (FastMCP reads its ``__signature__`` and ``__annotations__``) takes the shared
    parameters there instead, each with its type and :class:`RunOptions`' default, and hands them to the
    body as one ``RunOptions``. Put it under ``@tool``."""

    def decorate(body: ToolBody) -> ToolBody:
        signature = inspect.signature(body)
        hints = typing.get_type_hints(body, include_extras=True)
        if "shared" not in signature.parameters or set(params) & set(signature.parameters):
            raise TypeError(f"{body.__name__} must take `shared: RunOptions` and none of {sorted(params)}")
        plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name == "shared":  # the shared parameters go here
                parameters += [
                    inspect.Parameter(name, plain, default=_DEFAULTS[name], annotation=kind)
                    for name, kind in params.items()
                ]
            else:
                parameters.append(parameter.replace(kind=plain, annotation=hints[parameter.name]))
        seen = signature.replace(parameters=parameters, return_annotation=hints["return"])

        async def tool(*args: Any, **kwargs: Any) -> Reply:
            given = seen.bind(*args, **kwargs).arguments
            shared = {name: given.pop(name) for name in params if name in given}
            return await body(**given, shared=RunOptions(**shared))

        tool.__signature__ = seen  # type: ignore[attr-defined]
        tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": hints["return"]}
        tool.__name__, tool.__qualname__ = body.__name__, body.__qualname__
        tool.__module__, tool.__doc__ = body.__module__, body.__doc__
        return tool

    return decorate


def writes(title: str) -> ToolAnnotations:
    """Annotations of a tool that lets Kimi change the workspace."""
    return ToolAnnotations(
        title=title, read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )


def reads(title: str) -> ToolAnnotations:
    """Annotations of a tool whose Kimi cannot write files or run commands."""
    return ToolAnnotations(
        title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True
    )
