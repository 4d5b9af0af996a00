"""The tools' finishing steps, looked up by the tool's name: the tool's own result from the Kimi turn's.

A finisher is a plain function of the job's spec (its arguments and the files the caller sent), the turn's
result, the workspace Kimi worked in (an isolated copy's, or the caller's) and the settings; it runs where
the turn ran, after it. Tools without one (kimi_code_task, kimi_prompt, kimi_continue) return the turn's
result as it is."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from . import answers
from .config import Settings
from .job_spec import JobSpec
from .models import (
    AnalysisResult,
    CodeChange,
    ConsultResult,
    DebugResult,
    Evidence,
    RefactorResult,
    ReviewedInfo,
    ReviewResult,
    StructuredResult,
    TaskResult,
    TruncatedItem,
    VerifyResult,
)
from .review import workspace_path

R = TypeVar("R", bound=TaskResult)

Finisher = Callable[[JobSpec, TaskResult, Path, Settings], TaskResult]
"""``finish(spec, base, where, settings)``: the tool's result from the turn's ``base``; ``where``: the
workspace Kimi worked in."""


def finish(spec: JobSpec, base: TaskResult, where: Path, settings: Settings) -> TaskResult:
    """The result of ``spec``'s tool: its finisher's, or the turn's own (no finisher)."""
    finisher = FINISHERS.get(spec.tool)
    return base if finisher is None else finisher(spec, base, where, settings)


def structured(cls: type[R], base: TaskResult, answer_model: type[BaseModel]) -> tuple[R, Any]:
    """``base`` as a ``cls`` result, with Kimi's answer parsed as ``answer_model`` (``None`` if it does not
    parse; the raw answer's preview is kept either way)."""
    assert issubclass(cls, StructuredResult)
    parsed, _raw = answers.parse_answer(base.output, answer_model)
    result = cls(
        **base.model_dump(), parse_ok=parsed is not None, raw_response_preview=answers.preview(base.output)
    )
    if parsed is not None and hasattr(parsed, "evidence"):
        result.evidence = Evidence(**{**result.evidence.model_dump(), "cited": list(parsed.evidence)})
    return result, parsed


def analyzed(spec: JobSpec, base: TaskResult, _where: Path, _settings: Settings) -> TaskResult:
    result, parsed = structured(AnalysisResult, base, answers.AnalysisAnswer)
    result.role = spec.arguments.get("role", "general")
    result.analysis = parsed.analysis if parsed else base.output
    result.suggestions = list(parsed.suggestions) if parsed else []
    return result


def verified(_spec: JobSpec, base: TaskResult, _where: Path, _settings: Settings) -> TaskResult:
    result, parsed = structured(VerifyResult, base, answers.VerifyAnswer)
    if parsed:
        result.verdict = parsed.verdict
        result.findings = list(parsed.findings)
        result.unmet_requirements = list(parsed.unmet_requirements)
    return result


def consulted(spec: JobSpec, base: TaskResult, _where: Path, _settings: Settings) -> TaskResult:
    result, parsed = structured(ConsultResult, base, answers.ConsultAnswer)
    result.role = spec.arguments["role"]
    if parsed:
        result.response = parsed.response
        result.key_risks = list(parsed.key_risks)
        result.assumptions = list(parsed.assumptions)
        result.alternatives = list(parsed.alternatives)
        result.confidence = parsed.confidence
    else:
        result.response = base.output
    return result


def refactored(spec: JobSpec, base: TaskResult, where: Path, settings: Settings) -> TaskResult:
    """kimi_refactor: ``spec.sent`` holds its one file (the path relative to the workspace) as it was."""
    ((rel, original),) = spec.sent.items()
    result, parsed = structured(RefactorResult, base, answers.RefactorAnswer)
    after, withheld = _read_after(where, rel, settings.max_context_bytes)
    result.file_path = rel
    result.original_content = original
    result.refactored_content = after
    if withheld:
        result.notes.append(f"{rel} after the turn is not shown and not diffed: {withheld}")
    else:
        result.diff = _diff(rel, original, after or "")
    result.explanation = parsed.explanation if parsed else base.output
    result.behavior_preserved = parsed.behavior_preserved if parsed else None
    changed = {*base.files_created, *base.files_modified, *base.files_deleted}
    result.other_files_changed = sorted(changed - {rel})
    return result


def debugged(spec: JobSpec, base: TaskResult, where: Path, settings: Settings) -> TaskResult:
    """kimi_debug: a diff for each changed file the caller sent (``spec.sent``: the "before")."""
    result, parsed = structured(DebugResult, base, answers.DebugAnswer)
    described = {c.path: c.description for c in parsed.code_changes} if parsed else {}
    for path in [*base.files_modified, *base.files_created]:
        diff = ""
        if path in spec.sent:  # only what the caller sent has a "before" to diff against
            after, withheld = _read_after(where, path, settings.max_context_bytes)
            if withheld:
                result.notes.append(f"{path} after the turn is not diffed: {withheld}")
            else:
                diff = _diff(path, spec.sent[path], after or "")
        result.code_changes.append(CodeChange(path=path, description=described.get(path, ""), diff=diff))
    if parsed:
        result.diagnosis, result.root_cause, result.solution = (
            parsed.diagnosis,
            parsed.root_cause,
            parsed.solution,
        )
    else:
        result.diagnosis = base.output
    return result


def reviewed(spec: JobSpec, base: TaskResult, where: Path, _settings: Settings) -> TaskResult:
    """kimi_review: Kimi's findings on files of the reviewed diff (``arguments["diff_files"]``; others are
    dropped and said in the notes), the range reviewed and what was left out of the message."""
    result, parsed = structured(ReviewResult, base, answers.ReviewAnswer)
    arguments = spec.arguments
    result.reviewed = ReviewedInfo(**arguments["reviewed"])
    result.truncated += [TruncatedItem(**item) for item in arguments.get("left_out", [])]
    if parsed is None:
        result.summary = base.output
        return result
    in_diff = set(arguments.get("diff_files", []))
    dropped = []
    for finding in parsed.findings:
        path = workspace_path(where, finding.file)
        if path in in_diff:
            result.findings.append(finding.model_copy(update={"file": path}))
        else:
            dropped.append(f"{finding.file}: {finding.title or finding.detail[:80]}")
    if dropped:
        result.notes.append(
            f"{len(dropped)} finding(s) on files outside the reviewed diff dropped: " + "; ".join(dropped)
        )
    result.verdict, result.summary = parsed.verdict, parsed.summary
    return result


FINISHERS: dict[str, Finisher] = {
    "kimi_analyze_code": analyzed,
    "kimi_verify": verified,
    "kimi_consult": consulted,
    "kimi_refactor": refactored,
    "kimi_debug": debugged,
    "kimi_review": reviewed,
}


RESULT_CLASSES: dict[str, type[TaskResult]] = {
    "kimi_analyze_code": AnalysisResult,
    "kimi_verify": VerifyResult,
    "kimi_consult": ConsultResult,
    "kimi_refactor": RefactorResult,
    "kimi_debug": DebugResult,
    "kimi_review": ReviewResult,
}


def result_class(tool: str) -> type[TaskResult]:
    """The class of ``tool``'s results (a result that crossed a process boundary is read back as it)."""
    return RESULT_CLASSES.get(tool, TaskResult)


def _read_after(where: Path, rel: str, cap: int) -> tuple[str | None, str | None]:
    """``(text, None)`` of a file after the turn (text ``None``: it is gone), or ``(None, why)`` when the
    tracker's rules forbid showing it: a secret, a symlink or anything resolving outside the workspace, a
    binary, or more than ``cap`` characters (``max_context_bytes``, the cap on what was sent)."""
    from . import tracker  # start-up speed: it loads with the runner at the first call, not with the tools

    report = tracker.collect_contents(
        where, [rel], tracker.TrackerOptions(max_file_chars=cap, max_total_chars=cap)
    )
    if rel in report.secret_files:
        return None, "it looks like a secret file"
    if rel in report.binary_files:
        return None, "it is binary, a symlink, or resolves outside the workspace"
    if report.truncated:
        return None, f"it is larger than {cap} characters (KIMI_MCP_MAX_CONTEXT_BYTES)"
    return report.file_contents.get(rel), None


def _diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
