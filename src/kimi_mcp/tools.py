"""The MCP tools: thin functions that validate input, render a prompt, run one Kimi turn and shape the
result. Write tools may change the workspace; read-only tools run Kimi in plan mode and reject every
write or command at the approval layer."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.tools.base import ToolResult
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from . import answers, prompts
from ._logging import get_logger
from ._mcp_glue import client_roots, error_result, run_with_progress, to_tool_result
from .config import Settings
from .errors import BadInput, KimiMCPError
from .models import (
    AnalysisResult,
    CodeChange,
    ConsultResult,
    DebugResult,
    Evidence,
    RefactorResult,
    StructuredResult,
    TaskResult,
    VerifyResult,
)
from .runner import TaskRequest
from .secrets import Redactor, configured_secrets
from .workspace import ContextFile, read_context_files, resolve_workspace, safe_relative, workspace_overview

log = get_logger("tools")

ALL_TOOLS = (
    "kimi_code_task",
    "kimi_prompt",
    "kimi_refactor",
    "kimi_debug",
    "kimi_analyze_code",
    "kimi_verify",
    "kimi_consult",
)

Role = Literal["general", "security", "performance", "maintainability", "testing", "architecture"]
ConsultRole = Literal["skeptic", "architect", "debugger", "judge"]
WorkDir = Annotated[
    str | None,
    Field(description="Workspace directory (default: the client's root, KIMI_MCP_WORKSPACE or cwd)"),
]
Files = Annotated[list[str], Field(description="Files relative to the workspace; their contents go to Kimi")]

Reply = ToolResult | mcp_types.InputRequiredResult


class JudgeOption(BaseModel):
    name: str
    pros: list[str] = Field(default_factory=list)
    cons: list[str] = Field(default_factory=list)


class ExchangeTurn(BaseModel):
    role: Literal["user", "kimi"]
    content: str


def _write(title: str) -> ToolAnnotations:
    return ToolAnnotations(
        title=title, read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )


def _read(title: str) -> ToolAnnotations:
    return ToolAnnotations(
        title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True
    )


class _Call:
    """One tool invocation: workspace, context files, the Kimi run, the result."""

    def __init__(self, ctx: Context, settings: Settings, cls: type[TaskResult]) -> None:
        self.ctx, self.settings, self.cls = ctx, settings, cls
        self.workspace: Path | None = None
        self.redactor = Redactor()  # the run adds what it finds; done() masks the whole result with it
        log.debug("%s: call received", cls.__name__)

    async def workspace_for(self, work_dir: str | None) -> Path | mcp_types.InputRequiredResult:
        roots = [] if work_dir else await client_roots(self.ctx)
        if isinstance(roots, mcp_types.InputRequiredResult):
            return roots
        self.workspace = resolve_workspace(
            work_dir, roots, self.settings.workspace, allow_home=self.settings.allow_home_workspace
        )
        return self.workspace

    def files(self, paths: list[str], argument: str, *, required: bool = False) -> list[ContextFile]:
        if required and not paths:
            raise BadInput(f"{argument}: at least one file path is required")
        assert self.workspace is not None
        return read_context_files(self.workspace, list(paths), self.settings.max_context_bytes, argument)

    async def run(self, prompt: str, *, read_only: bool) -> TaskResult:
        assert self.workspace is not None
        log.debug("workspace %s; running", self.workspace)
        request = TaskRequest(
            prompt=prompt, workspace=self.workspace, read_only=read_only, redactor=self.redactor
        )
        return await run_with_progress(self.ctx, request, self.settings)

    def fail(self, exc: KimiMCPError) -> ToolResult:
        self.redactor.add(configured_secrets(os.environ))
        result = error_result(exc, str(self.workspace or ""), self.cls)
        return to_tool_result(result, self.settings, self.redactor)

    def done(self, result: TaskResult) -> ToolResult:
        reply = to_tool_result(result, self.settings, self.redactor)
        log.debug("result ready")
        return reply


def _structured(cls: type[StructuredResult], base: TaskResult, answer_model: type[BaseModel]) -> Any:
    parsed, _raw = answers.parse_answer(base.output, answer_model)
    result = cls(
        **base.model_dump(), parse_ok=parsed is not None, raw_response_preview=answers.preview(base.output)
    )
    if parsed is not None and hasattr(parsed, "evidence"):
        result.evidence = Evidence(**{**result.evidence.model_dump(), "cited": list(parsed.evidence)})
    return result, parsed


def _diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )


def register_tools(mcp: FastMCP, settings: Settings) -> list[str]:
    """Register the tools allowed by ``settings.tools`` (all when unset). Returns their names."""
    enabled = set(settings.tools) if settings.tools else set(ALL_TOOLS)
    unknown = enabled - set(ALL_TOOLS)
    if unknown:
        raise ValueError(
            f"KIMI_MCP_TOOLS names unknown tools {sorted(unknown)}; valid: {', '.join(ALL_TOOLS)}"
        )

    def schema(cls: type[BaseModel]) -> dict[str, Any]:
        return cls.model_json_schema()

    if "kimi_code_task" in enabled:

        @mcp.tool(
            name="kimi_code_task",
            description=(
                "Delegate a coding task to Kimi (Moonshot's coding agent) in a workspace. Kimi may read, create, "
                "edit and delete files inside the workspace and run shell commands there. Returns Kimi's final "
                "answer and every file it created, modified or deleted, with the text of created/modified files "
                "(within size budgets; secrets withheld), plus evidence of the tools it ran."
            ),
            annotations=_write("Kimi: coding task"),
            output_schema=schema(TaskResult),
        )
        async def kimi_code_task(
            ctx: Context,
            task_description: Annotated[
                str, Field(description="What Kimi should do, self-contained", max_length=100_000)
            ],
            context_files: Files = [],  # noqa: B006 - schema default, never mutated
            constraints: Annotated[
                str | None, Field(description="Rules Kimi must follow (style, scope, …)")
            ] = None,
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, TaskResult)
            try:
                if not task_description.strip():
                    raise BadInput("task_description is empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                prompt = prompts.code_task_prompt(
                    task_description, call.files(context_files, "context_files"), constraints
                )
            except KimiMCPError as exc:
                return call.fail(exc)
            return call.done(await call.run(prompt, read_only=False))

    if "kimi_prompt" in enabled:

        @mcp.tool(
            name="kimi_prompt",
            description=(
                "Send a free-form prompt to Kimi in a workspace (it may change files, like kimi_code_task). "
                "With include_workspace_context, a listing of the workspace's files is added to the prompt."
            ),
            annotations=_write("Kimi: prompt"),
            output_schema=schema(TaskResult),
        )
        async def kimi_prompt(
            ctx: Context,
            prompt: Annotated[str, Field(description="The prompt for Kimi", max_length=100_000)],
            include_workspace_context: Annotated[bool, Field(description="Add a file listing")] = False,
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, TaskResult)
            try:
                if not prompt.strip():
                    raise BadInput("prompt is empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                overview = workspace_overview(ws) if include_workspace_context else None
                text = prompts.prompt_prompt(prompt, overview)
            except KimiMCPError as exc:
                return call.fail(exc)
            return call.done(await call.run(text, read_only=False))

    if "kimi_refactor" in enabled:

        @mcp.tool(
            name="kimi_refactor",
            description=(
                "Ask Kimi to refactor one file in place. Returns the original and refactored contents, a unified "
                "diff, Kimi's explanation, and any other file that changed (reported, never hidden). With "
                "safety_checks (default), Kimi is told to preserve behaviour and the public API."
            ),
            annotations=_write("Kimi: refactor a file"),
            output_schema=schema(RefactorResult),
        )
        async def kimi_refactor(
            ctx: Context,
            file_path: Annotated[str, Field(description="File to refactor, relative to the workspace")],
            refactor_instructions: Annotated[str, Field(description="What to change", max_length=50_000)],
            safety_checks: Annotated[bool, Field(description="Preserve behaviour and public API")] = True,
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, RefactorResult)
            try:
                if not refactor_instructions.strip():
                    raise BadInput("refactor_instructions is empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                rel = safe_relative(ws, file_path)
                original = call.files([rel], "file_path", required=True)[0].text
                text = prompts.refactor_prompt(rel, original, refactor_instructions, safety_checks)
            except KimiMCPError as exc:
                return call.fail(exc)
            base = await call.run(text, read_only=False)
            result, parsed = _structured(RefactorResult, base, answers.RefactorAnswer)
            target = ws / rel
            after = target.read_text(encoding="utf-8", errors="replace") if target.is_file() else None
            result.file_path = rel
            result.original_content = original
            result.refactored_content = after
            result.diff = _diff(rel, original, after or "")
            result.explanation = parsed.explanation if parsed else base.output
            result.behavior_preserved = parsed.behavior_preserved if parsed else None
            changed = {*base.files_created, *base.files_modified, *base.files_deleted}
            result.other_files_changed = sorted(changed - {rel})
            return call.done(result)

    if "kimi_debug" in enabled:

        @mcp.tool(
            name="kimi_debug",
            description=(
                "Ask Kimi to find the root cause of an error and fix it. Returns the diagnosis, the solution, "
                "and the code changes (with diffs of the relevant files), plus every changed file."
            ),
            annotations=_write("Kimi: debug and fix"),
            output_schema=schema(DebugResult),
        )
        async def kimi_debug(
            ctx: Context,
            error_message: Annotated[str, Field(description="The error / failing output", max_length=50_000)],
            relevant_files: Files = [],  # noqa: B006
            context: Annotated[str | None, Field(description="What you were doing, what you tried")] = None,
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, DebugResult)
            try:
                if not error_message.strip():
                    raise BadInput("error_message is empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                files = call.files(relevant_files, "relevant_files")
                text = prompts.debug_prompt(error_message, files, context)
            except KimiMCPError as exc:
                return call.fail(exc)
            base = await call.run(text, read_only=False)
            result, parsed = _structured(DebugResult, base, answers.DebugAnswer)
            originals = {f.path: f.text for f in files}
            described = {c.path: c.description for c in parsed.code_changes} if parsed else {}
            for path in [*base.files_modified, *base.files_created]:
                after = (
                    (ws / path).read_text(encoding="utf-8", errors="replace") if (ws / path).is_file() else ""
                )
                diff = _diff(path, originals[path], after) if path in originals else ""
                result.code_changes.append(
                    CodeChange(path=path, description=described.get(path, ""), diff=diff)
                )
            if parsed:
                result.diagnosis, result.root_cause, result.solution = (
                    parsed.diagnosis,
                    parsed.root_cause,
                    parsed.solution,
                )
            else:
                result.diagnosis = base.output
            return call.done(result)

    if "kimi_analyze_code" in enabled:

        @mcp.tool(
            name="kimi_analyze_code",
            description=(
                "Read-only: ask Kimi to analyse files (general, security, performance, maintainability, testing "
                "or architecture). Kimi cannot write files or run commands. Returns the analysis, suggestions "
                "with file:line, and evidence of what Kimi read."
            ),
            annotations=_read("Kimi: analyse code"),
            output_schema=schema(AnalysisResult),
        )
        async def kimi_analyze_code(
            ctx: Context,
            file_paths: Files,
            analysis_focus: Annotated[str | None, Field(description="What to look at in particular")] = None,
            role: Annotated[Role, Field(description="Reviewer perspective")] = "general",
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, AnalysisResult)
            try:
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                text = prompts.analyze_prompt(
                    call.files(file_paths, "file_paths", required=True), analysis_focus, role
                )
            except KimiMCPError as exc:
                return call.fail(exc)
            base = await call.run(text, read_only=True)
            result, parsed = _structured(AnalysisResult, base, answers.AnalysisAnswer)
            result.role = role
            result.analysis = parsed.analysis if parsed else base.output
            result.suggestions = list(parsed.suggestions) if parsed else []
            return call.done(result)

    if "kimi_verify" in enabled:

        @mcp.tool(
            name="kimi_verify",
            description=(
                "Read-only: ask Kimi to check files against requirements. Returns a verdict (pass/fail/partial), "
                "findings with file:line, and the unmet requirements. Kimi cannot write files or run commands."
            ),
            annotations=_read("Kimi: verify requirements"),
            output_schema=schema(VerifyResult),
        )
        async def kimi_verify(
            ctx: Context,
            requirements: Annotated[
                str | list[str], Field(description="Requirements to check (text or a list of items)")
            ],
            file_paths: Files,
            prompt: Annotated[str | None, Field(description="Extra instructions for the check")] = None,
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, VerifyResult)
            try:
                items = [requirements] if isinstance(requirements, str) else list(requirements)
                items = [item.strip() for item in items if item and item.strip()]
                if not items:
                    raise BadInput("requirements are empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                req_text = items[0] if len(items) == 1 else "\n".join(f"- {item}" for item in items)
                text = prompts.verify_prompt(
                    req_text, call.files(file_paths, "file_paths", required=True), prompt
                )
            except KimiMCPError as exc:
                return call.fail(exc)
            base = await call.run(text, read_only=True)
            result, parsed = _structured(VerifyResult, base, answers.VerifyAnswer)
            if parsed:
                result.verdict = parsed.verdict
                result.findings = list(parsed.findings)
                result.unmet_requirements = list(parsed.unmet_requirements)
            return call.done(result)

    if "kimi_consult" in enabled:

        @mcp.tool(
            name="kimi_consult",
            description=(
                "Read-only: consult Kimi in a role — skeptic (proposal, goals, constraints, known_risks), "
                "architect (requirements, alternatives), debugger (symptoms, repro, logs, tried) or judge "
                "(options with pros/cons, criteria). Pass prior_exchange for follow-up rounds. Returns a "
                "response, key risks, assumptions, alternatives, confidence and evidence."
            ),
            annotations=_read("Kimi: consult"),
            output_schema=schema(ConsultResult),
        )
        async def kimi_consult(
            ctx: Context,
            role: Annotated[ConsultRole, Field(description="Kimi's role")],
            message: Annotated[
                str, Field(description="Your question or the matter to consult on", max_length=50_000)
            ],
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
            work_dir: WorkDir = None,
        ) -> Reply:
            call = _Call(ctx, settings, ConsultResult)
            given = {
                "proposal": proposal, "goals": goals, "constraints": constraints, "known_risks": known_risks,
                "requirements": requirements, "alternatives": alternatives, "symptoms": symptoms,
                "repro": repro, "logs": logs, "tried": tried, "criteria": criteria,
                "options": [o.model_dump() for o in options] if options else None,
            }  # fmt: skip
            context: dict[str, object] = {k: v for k, v in given.items() if v}
            try:
                if not message.strip():
                    raise BadInput("message is empty")
                if isinstance(ws := await call.workspace_for(work_dir), mcp_types.InputRequiredResult):
                    return ws
                files = call.files(file_paths, "file_paths")
                if files:
                    context["files"] = "\n".join(f'<file path="{f.path}">\n{f.text}\n</file>' for f in files)
                history = [turn.model_dump() for turn in prior_exchange] if prior_exchange else None
                try:
                    text = prompts.consult_prompt(role, message, context, history)
                except ValueError as exc:
                    raise BadInput(str(exc)) from exc
            except KimiMCPError as exc:
                return call.fail(exc)
            base = await call.run(text, read_only=True)
            result, parsed = _structured(ConsultResult, base, answers.ConsultAnswer)
            result.role = role
            result.incomplete_trace = result.evidence.incomplete_trace
            if parsed:
                result.response = parsed.response
                result.key_risks = list(parsed.key_risks)
                result.assumptions = list(parsed.assumptions)
                result.alternatives = list(parsed.alternatives)
                result.confidence = parsed.confidence
            else:
                result.response = base.output
            return call.done(result)

    return [name for name in ALL_TOOLS if name in enabled]
