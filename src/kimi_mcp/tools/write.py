"""The write tools: Kimi may create, edit and delete files in the workspace and run commands there."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from pydantic import Field

from .. import prompts
from ..adapter.pipeline import Backend, Call, Reply, RunOptions, current_backend, not_blank, run_tool
from ..adapter.tasks import TASK
from ..models import DebugResult, RefactorResult, TaskResult
from ..workspace import safe_relative, workspace_overview
from ._params import FIX_OPTIONS, IN_ONE_MESSAGE, WRITE_OPTIONS, Files, run_options, writes


@tool(
    description=(
        "Delegate a coding task to Kimi (Moonshot's coding agent) in a workspace. Kimi may read, create, "
        "edit and delete files inside the workspace and run shell commands there. Returns Kimi's final "
        "answer and every file it created, modified or deleted, with the text of created/modified files "
        "(within size budgets; secrets withheld), plus evidence of the tools it ran."
    ),
    annotations=writes("Kimi: coding task"),
    task=TASK,
    output_schema=TaskResult.model_json_schema(),
)
@run_options(FIX_OPTIONS)
async def kimi_code_task(
    ctx: Context,
    task_description: Annotated[
        str, Field(description="What Kimi should do, self-contained" + IN_ONE_MESSAGE)
    ],
    context_files: Files = [],  # noqa: B006 - schema default, never mutated
    constraints: Annotated[str | None, Field(description="Rules Kimi must follow (style, scope, …)")] = None,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    def prompt(call: Call, _ws: Path) -> str:
        files = call.files(context_files, "context_files")
        return prompts.code_task_prompt(task_description, files, constraints)

    check = not_blank(task_description=task_description)
    arguments = {
        "task_description": task_description,
        "context_files": context_files,
        "constraints": constraints,
    }
    return await run_tool(
        ctx, backend, TaskResult, prompt, shared, tool="kimi_code_task", arguments=arguments,
        read_only=False, check=check,
    )  # fmt: skip


@tool(
    description=(
        "Send a free-form prompt to Kimi in a workspace (it may change files, like kimi_code_task). "
        "With include_workspace_context, a listing of the workspace's files is added to the prompt."
    ),
    annotations=writes("Kimi: prompt"),
    task=TASK,
    output_schema=TaskResult.model_json_schema(),
)
@run_options(WRITE_OPTIONS)
async def kimi_prompt(
    ctx: Context,
    prompt: Annotated[str, Field(description="The prompt for Kimi" + IN_ONE_MESSAGE)],
    include_workspace_context: Annotated[bool, Field(description="Add a file listing")] = False,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    def text(_call: Call, ws: Path) -> str:
        return prompts.free_prompt(prompt, workspace_overview(ws) if include_workspace_context else None)

    arguments = {"prompt": prompt, "include_workspace_context": include_workspace_context}
    return await run_tool(
        ctx, backend, TaskResult, text, shared, tool="kimi_prompt", arguments=arguments, read_only=False,
        check=not_blank(prompt=prompt),
    )  # fmt: skip


@tool(
    description=(
        "Ask Kimi to refactor one file in place. Returns the original and refactored contents, a unified "
        "diff, Kimi's explanation, and any other file that changed (reported, never hidden). With "
        "safety_checks (default), Kimi is told to preserve behaviour and the public API."
    ),
    annotations=writes("Kimi: refactor a file"),
    task=TASK,
    output_schema=RefactorResult.model_json_schema(),
)
@run_options(FIX_OPTIONS)
async def kimi_refactor(
    ctx: Context,
    file_path: Annotated[str, Field(description="File to refactor, relative to the workspace")],
    refactor_instructions: Annotated[str, Field(description="What to change" + IN_ONE_MESSAGE)],
    safety_checks: Annotated[bool, Field(description="Preserve behaviour and public API")] = True,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    def prompt(call: Call, ws: Path) -> str:
        rel = safe_relative(ws, file_path)
        original = call.files([rel], "file_path", required=True)[0].text
        call.sent = {rel: original}  # the finisher diffs it (kimi_mcp.finish.refactored)
        return prompts.refactor_prompt(rel, original, refactor_instructions, safety_checks)

    check = not_blank(refactor_instructions=refactor_instructions)
    arguments = {
        "file_path": file_path, "refactor_instructions": refactor_instructions, "safety_checks": safety_checks,
    }  # fmt: skip
    return await run_tool(
        ctx, backend, RefactorResult, prompt, shared, tool="kimi_refactor", arguments=arguments,
        read_only=False, check=check,
    )  # fmt: skip


@tool(
    description=(
        "Ask Kimi to find the root cause of an error and fix it. Returns the diagnosis, the solution, "
        "and the code changes (with diffs of the relevant files), plus every changed file."
    ),
    annotations=writes("Kimi: debug and fix"),
    task=TASK,
    output_schema=DebugResult.model_json_schema(),
)
@run_options(FIX_OPTIONS)
async def kimi_debug(
    ctx: Context,
    error_message: Annotated[str, Field(description="The error / failing output" + IN_ONE_MESSAGE)],
    relevant_files: Files = [],  # noqa: B006
    context: Annotated[str | None, Field(description="What you were doing, what you tried")] = None,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    def prompt(call: Call, _ws: Path) -> str:
        files = call.files(relevant_files, "relevant_files")
        call.sent = {f.path: f.text for f in files}  # the "before" of the diffs (kimi_mcp.finish.debugged)
        return prompts.debug_prompt(error_message, files, context)

    check = not_blank(error_message=error_message)
    arguments = {"error_message": error_message, "relevant_files": relevant_files, "context": context}
    return await run_tool(
        ctx, backend, DebugResult, prompt, shared, tool="kimi_debug", arguments=arguments,
        read_only=False, check=check,
    )  # fmt: skip
