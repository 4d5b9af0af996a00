"""The read-only tools: Kimi runs in plan mode and every write or command is rejected at the approval
layer, so these can run in parallel with anything."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastmcp import Context
from fastmcp.dependencies import Depends
from fastmcp.tools import tool
from pydantic import BaseModel, Field

from .. import prompts
from ..adapter.pipeline import Backend, Call, Reply, RunOptions, current_backend, not_blank, run_tool
from ..adapter.tasks import TASK
from ..errors import BadInput
from ..models import AnalysisResult, ConsultResult, VerifyResult
from ._params import IN_ONE_MESSAGE, READ_OPTIONS, Files, reads, run_options

Role = Literal["general", "security", "performance", "maintainability", "testing", "architecture"]
ConsultRole = Literal["skeptic", "architect", "debugger", "judge"]


class JudgeOption(BaseModel):
    name: str
    pros: list[str] = Field(default_factory=list)
    cons: list[str] = Field(default_factory=list)


class ExchangeTurn(BaseModel):
    role: Literal["user", "kimi"]
    content: str


@tool(
    description=(
        "Read-only: ask Kimi to analyse files (general, security, performance, maintainability, testing "
        "or architecture). Kimi cannot write files or run commands. Returns the analysis, suggestions "
        "with file:line, and evidence of what Kimi read."
    ),
    annotations=reads("Kimi: analyse code"),
    task=TASK,
    output_schema=AnalysisResult.model_json_schema(),
)
@run_options(READ_OPTIONS)
async def kimi_analyze_code(
    ctx: Context,
    file_paths: Files,
    analysis_focus: Annotated[str | None, Field(description="What to look at in particular")] = None,
    role: Annotated[Role, Field(description="Reviewer perspective")] = "general",
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    def prompt(call: Call, _ws: Path) -> str:
        return prompts.analyze_prompt(
            call.files(file_paths, "file_paths", required=True), analysis_focus, role
        )

    arguments = {"file_paths": file_paths, "analysis_focus": analysis_focus, "role": role}
    return await run_tool(
        ctx, backend, AnalysisResult, prompt, shared, tool="kimi_analyze_code", arguments=arguments,
        read_only=True,
    )  # fmt: skip


@tool(
    description=(
        "Read-only: ask Kimi to check files against requirements. Returns a verdict (pass/fail/partial), "
        "findings with file:line, and the unmet requirements. Kimi cannot write files or run commands."
    ),
    annotations=reads("Kimi: verify requirements"),
    task=TASK,
    output_schema=VerifyResult.model_json_schema(),
)
@run_options(READ_OPTIONS)
async def kimi_verify(
    ctx: Context,
    requirements: Annotated[
        str | list[str], Field(description="Requirements to check (text or a list of items)")
    ],
    file_paths: Files,
    prompt: Annotated[str | None, Field(description="Extra instructions for the check")] = None,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    items = [requirements] if isinstance(requirements, str) else list(requirements)
    items = [item.strip() for item in items if item and item.strip()]
    listed = items[0] if len(items) == 1 else "\n".join(f"- {item}" for item in items)

    def text(call: Call, _ws: Path) -> str:
        return prompts.verify_prompt(listed, call.files(file_paths, "file_paths", required=True), prompt)

    def check() -> None:
        if not items:
            raise BadInput("requirements are empty")

    arguments = {"requirements": items, "file_paths": file_paths, "prompt": prompt}
    return await run_tool(
        ctx, backend, VerifyResult, text, shared, tool="kimi_verify", arguments=arguments, read_only=True,
        check=check,
    )  # fmt: skip


@tool(
    description=(
        "Read-only: consult Kimi in a role — skeptic (proposal, goals, constraints, known_risks), "
        "architect (requirements, alternatives), debugger (symptoms, repro, logs, tried) or judge "
        "(options with pros/cons, criteria). Pass prior_exchange for follow-up rounds. Returns a "
        "response, key risks, assumptions, alternatives, confidence and evidence."
    ),
    annotations=reads("Kimi: consult"),
    task=TASK,
    output_schema=ConsultResult.model_json_schema(),
)
@run_options(READ_OPTIONS)
async def kimi_consult(
    ctx: Context,
    role: Annotated[ConsultRole, Field(description="Kimi's role")],
    message: Annotated[str, Field(description="Your question or the matter to consult on" + IN_ONE_MESSAGE)],
    proposal: str | None = None,
    goals: str | None = None,
    constraints: str | None = None,
    known_risks: str | None = None,
    requirements: str | None = None,
    alternatives: str | None = None,
    symptoms: str | None = None,
    repro: str | None = None,
    logs: str | None = None,
    tried: str | None = None,
    options: list[JudgeOption] | None = None,
    criteria: str | None = None,
    file_paths: Files = [],  # noqa: B006
    prior_exchange: Annotated[
        list[ExchangeTurn] | None, Field(description="Earlier rounds of this consultation")
    ] = None,
    *,
    shared: RunOptions,
    backend: Backend = Depends(current_backend),  # noqa: B008
) -> Reply:
    given = {
        "proposal": proposal, "goals": goals, "constraints": constraints, "known_risks": known_risks,
        "requirements": requirements, "alternatives": alternatives, "symptoms": symptoms,
        "repro": repro, "logs": logs, "tried": tried, "criteria": criteria,
        "options": [o.model_dump() for o in options] if options else None,
    }  # fmt: skip
    context: dict[str, object] = {k: v for k, v in given.items() if v}
    history = [turn.model_dump() for turn in prior_exchange] if prior_exchange else None

    def prompt(call: Call, _ws: Path) -> str:
        files = call.files(file_paths, "file_paths")
        if files:
            context["files"] = "\n".join(f'<file path="{f.path}">\n{f.text}\n</file>' for f in files)
        try:
            return prompts.consult_prompt(role, message, context, history)
        except ValueError as exc:
            raise BadInput(str(exc)) from exc

    check = not_blank(message=message)
    arguments = {"role": role, "message": message, "file_paths": file_paths, **context}
    return await run_tool(
        ctx, backend, ConsultResult, prompt, shared, tool="kimi_consult", arguments=arguments,
        read_only=True, check=check,
    )  # fmt: skip
