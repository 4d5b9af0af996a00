"""Typed results returned by the tools (their ``outputSchema``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import ErrorType, KimiMCPError


class _Model(BaseModel):
    """Each result model builds its validator at its first use, not when this module loads (start-up speed:
    a server's first call needs two or three of them)."""

    model_config = ConfigDict(defer_build=True)


class ErrorInfo(_Model):
    """Why a call failed and what to do about it."""

    type: ErrorType
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    suggestion: str
    retryable: bool

    @classmethod
    def from_exception(cls, exc: KimiMCPError) -> ErrorInfo:
        return cls(
            type=exc.type,
            message=exc.message,
            details=exc.details,
            suggestion=exc.suggestion,
            retryable=exc.retryable,
        )


class TruncatedItem(_Model):
    """Something left out of the result to stay within the size budgets."""

    path: str = Field(description="File (relative to the workspace) or result field that was cut")
    reason: Literal["file_too_large", "total_budget", "result_budget", "message_limit"]
    size_bytes: int = Field(description="Full size on disk (or of the field)")
    returned_chars: int = Field(description="How many characters were returned (0 = none)")
    uri: str | None = Field(
        default=None, description="An MCP resource with the whole text (resources/read), when there is one"
    )


class ToolCallTrace(_Model):
    """One tool Kimi ran during the turn, from Kimi's own session log."""

    name: str
    arguments: str = Field(description="Arguments as JSON text, trimmed")
    result: str | None = Field(default=None, description="Result summary, trimmed; null if none was logged")
    is_error: bool = False
    approval: Literal["auto", "approved", "rejected"] = "auto"


class Usage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = Field(
        default=None, description="At the model's price in KIMI_MCP_PRICES (null: no price configured)"
    )


class QuestionOption(_Model):
    label: str
    description: str = ""


class QuestionInfo(_Model):
    """The question a job waits on (status 'waiting'): answer it with kimi_job(job_id, action='answer',
    answer=...)."""

    kind: Literal["question", "approval"] = "question"
    text: str
    header: str = ""
    options: list[QuestionOption] = Field(default_factory=list)
    multi_select: bool = Field(default=False, description="The answer may be a list of option labels")
    free_text: bool = Field(default=True, description="Any other text is accepted as the answer")
    asked_at: str = Field(default="", description="ISO 8601, UTC")
    id: str = Field(
        default="",
        description="The question's id: pass it as kimi_job's question_id, so an answer that comes after this "
        "question was answered or dismissed is refused instead of answering the next one",
    )


class MessageInfo(_Model):
    """A message sent to the running job (kimi_steer) that reached Kimi."""

    at: str = Field(description="ISO 8601, UTC")
    mode: Literal["steer", "interrupt", "queue"]
    delivered: Literal["in_turn", "next_turn"]
    text: str


class Evidence(_Model):
    """What Kimi looked at and did, from its own session log (not from its prose)."""

    files_read: list[str] = Field(default_factory=list, description="Files Kimi read or searched")
    tools_run: list[ToolCallTrace] = Field(default_factory=list, description="Every tool call, in order")
    incomplete_trace: bool = Field(default=False, description="A tool call has no logged result")
    cited: list[str] = Field(default_factory=list, description="Evidence Kimi cited in its structured answer")


JobStatus = Literal["done", "running", "starting", "queued", "waiting", "failed", "cancelled", "interrupted"]
GOING: tuple[str, ...] = ("running", "starting", "queued", "waiting")
"""The statuses of a job that is not finished: queued (waiting for a slot), starting (Kimi starts, or the ready
Kimi finishes starting), running (Kimi's turn), waiting (Kimi asked a question: ``question`` says what)."""


class JobProgress(_Model):
    """Where a job that is still going stands."""

    elapsed_s: float = Field(description="Seconds since the job started")
    activity: str = Field(
        default="", description="What Kimi did last (e.g. 'Kimi runs WriteFile src/app.py')"
    )
    files_changed: list[str] = Field(
        default_factory=list, description="Files created, modified or deleted so far (relative paths)"
    )


class WorktreeInfo(_Model):
    """Where an isolated job (``isolation="worktree"``) worked, and its change against the base."""

    id: str = Field(description="The isolated copy (the first job of its conversation)")
    path: str = Field(description="Kimi's workspace inside the copy (under KIMI_MCP_STATE_DIR)")
    base: str = Field(description="The base commit: your tree as it was when the job started")
    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0


class VerifyOutcome(_Model):
    """``verify_command`` run after Kimi's turn, where the job ran (the isolated copy, or the workspace)."""

    command: str
    exit_code: int | None = Field(description="null: it timed out or could not start")
    passed: bool
    timed_out: bool = False
    duration_s: float = 0.0
    output_tail: str = Field(default="", description="The last lines of its stdout and stderr")


class FixRound(_Model):
    """One round of ``fix_rounds``: Kimi's turn (round 0: the first; then each fix turn), then the check."""

    round: int = Field(description="0: the first turn; 1, 2, ...: the fix turns")
    exit_code: int | None = Field(description="verify_command's exit code after the round (null: timed out)")
    output_tail: str = Field(
        default="", description="The end of its output (masked, at most 4,000 characters)"
    )
    duration_s: float = Field(default=0.0, description="Seconds of the round: Kimi's turn and the check")
    tokens: int = Field(default=0, description="Kimi's input + output tokens in the round")


class AttemptSummary(_Model):
    """One of several parallel attempts (``attempts``), best first."""

    job_id: str
    status: JobStatus
    success: bool = False
    output: str = Field(default="", description="Kimi's answer, trimmed")
    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0
    verify: VerifyOutcome | None = None
    error: str | None = None


class DryRunInfo(_Model):
    """What a call would do (``dry_run=true``): its prompt, computed as the real call computes it."""

    prompt_chars: int = Field(description="Characters of Kimi's message")
    prompt_tokens: int = Field(description="Tokens of Kimi's message, as Kimi estimates them")
    files_sent: list[str] = Field(default_factory=list, description="Files whose contents go to Kimi")
    redacted: list[str] = Field(
        default_factory=list, description="Secret files among them: named, their contents never read"
    )
    truncated: list[TruncatedItem] = Field(
        default_factory=list, description="What would be left out of the message (kimi_review: by file)"
    )
    workspace: str
    model: str | None = Field(
        default=None, description="The call's model, else KIMI_MCP_MODEL; null: Kimi's default model"
    )
    isolation: Literal["none", "worktree"] = "none"
    runs_on: Literal["local", "worker"] = Field(
        default="local", description="worker: a kimi-mcp worker would run it (KIMI_MCP_BROKER)"
    )
    max_tokens: int | None = Field(default=None, description="The job's token limit; null: none")


class TaskResult(_Model):
    """What Kimi said and every file it created, changed or deleted."""

    success: bool | None = Field(
        description="true: done; false: failed, cancelled or interrupted (see error); null: the job is still "
        "going (see status)"
    )
    job_id: str = Field(
        default="", description="This call's job: kimi_job(job_id) waits for it or reads it again"
    )
    status: JobStatus = Field(
        default="done",
        description="done / failed / cancelled / interrupted (finished), or queued / starting / running (still "
        "going: kimi_job waits for it), or waiting (Kimi asked a question: answer it with kimi_job(job_id, "
        "action='answer', answer=...))",
    )
    progress: JobProgress | None = Field(default=None, description="Only while the job is still going")
    question: QuestionInfo | None = Field(default=None, description="Only while the job is waiting")
    output: str = Field(default="", description="Kimi's final answer text")
    files_created: list[str] = Field(default_factory=list, description="Paths relative to the workspace")
    files_modified: list[str] = Field(default_factory=list)
    files_deleted: list[str] = Field(default_factory=list)
    file_contents: dict[str, str] = Field(
        default_factory=dict, description="path -> text for created/modified text files (within budgets)"
    )
    binary_files: list[str] = Field(default_factory=list, description="Created/modified files without text")
    secret_files: list[str] = Field(
        default_factory=list, description="Created/modified files whose contents are withheld (secrets)"
    )
    truncated: list[TruncatedItem] = Field(default_factory=list)
    evidence: Evidence = Field(default_factory=Evidence)
    usage: Usage | None = None
    workspace: str = ""
    dialect: str = ""
    kimi_version: str = ""
    worker: str | None = Field(
        default=None, description="The kimi-mcp worker that ran the job (KIMI_MCP_BROKER); null: this server"
    )
    model: str | None = Field(
        default=None,
        description="The model alias Kimi ran with (the call's, KIMI_MCP_MODEL or Kimi's default); null: Kimi had "
        "no model yet (the automated login chose one)",
    )
    session_id: str | None = Field(
        default=None, description="Kimi's conversation: kimi_continue(session_id, message) sends a follow-up"
    )
    group: str | None = Field(
        default=None, description="The call's group: kimi_wait(group=...) and kimi_jobs(group=...) take it"
    )
    duration_s: float = 0.0
    warm_start: bool = Field(
        default=False, description="A ready standby Kimi served the call (no startup wait)"
    )
    timings: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Seconds per phase: startup (spawn to ready, or taking a standby), turn, changes (turn end to "
            "change list), exit (only when the call waited for Kimi to exit: after errors)"
        ),
    )
    diff: str = Field(
        default="",
        description="Unified diff: the whole change of an isolated (worktree) job against its base, every turn "
        "of its conversation included (kimi_refactor in place: of file_path)",
    )
    worktree: WorktreeInfo | None = Field(
        default=None, description="isolation='worktree': the copy Kimi worked in; kimi_apply / kimi_discard"
    )
    verify: VerifyOutcome | None = Field(
        default=None,
        description="verify_command's outcome after the last round (in the copy, or the workspace)",
    )
    rounds: list[FixRound] = Field(
        default_factory=list,
        description="verify_command given: each round (Kimi's turn, then the check), round 0 the first turn; "
        "fix_rounds > 0 sends a failed check back to Kimi as a next turn",
    )
    attempts: list[AttemptSummary] = Field(
        default_factory=list, description="attempts > 1: every attempt, best first (this result is the first)"
    )
    messages: list[MessageInfo] = Field(
        default_factory=list, description="Messages sent to the running job (kimi_steer) that reached Kimi"
    )
    error: ErrorInfo | None = None
    notes: list[str] = Field(
        default_factory=list, description="What the caller should know about this result that is not an error"
    )
    dry_run: DryRunInfo | None = Field(
        default=None, description="dry_run=true: what the call would do; nothing started, nothing stored"
    )


class StructuredResult(TaskResult):
    """A result whose main fields come from a JSON block Kimi was asked to produce."""

    parse_ok: bool = Field(default=False, description="Kimi's answer contained valid JSON of the asked shape")
    raw_response_preview: str = Field(
        default="", description="Start of Kimi's raw answer (for parse failures)"
    )


class RefactorResult(StructuredResult):
    file_path: str = ""
    original_content: str | None = None
    refactored_content: str | None = None
    explanation: str = ""
    behavior_preserved: bool | None = None
    other_files_changed: list[str] = Field(
        default_factory=list, description="Files changed besides file_path (reported, not hidden)"
    )


class CodeChange(_Model):
    path: str
    description: str = ""
    diff: str = Field(default="", description="Unified diff when the original was known (relevant_files)")


class DebugResult(StructuredResult):
    diagnosis: str = ""
    root_cause: str = ""
    solution: str = ""
    code_changes: list[CodeChange] = Field(default_factory=list)


class Suggestion(_Model):
    title: str = ""
    detail: str = ""
    file: str | None = None
    line: int | None = None
    severity: Literal["info", "low", "medium", "high", "critical"] | None = None


class AnalysisResult(StructuredResult):
    role: str = "general"
    analysis: str = ""
    suggestions: list[Suggestion] = Field(default_factory=list)


class Finding(_Model):
    requirement: str = ""
    status: Literal["met", "unmet", "partial", "unknown"] = "unknown"
    file: str | None = None
    line: int | None = None
    detail: str = ""


class VerifyResult(StructuredResult):
    verdict: Literal["pass", "fail", "partial", "unknown"] = "unknown"
    findings: list[Finding] = Field(default_factory=list)
    unmet_requirements: list[str] = Field(default_factory=list)


class ConsultResult(StructuredResult):
    role: str = ""
    response: str = ""
    key_risks: list[str] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list)
    confidence: float | None = Field(default=None, ge=0, le=1)


class ReviewFinding(_Model):
    file: str = Field(description="A file of the reviewed diff, relative to the workspace")
    line: int | None = Field(default=None, description="1-based line in the file's new version")
    severity: Literal["critical", "major", "minor", "nit"] = "minor"
    title: str = ""
    detail: str = ""
    suggestion: str = ""


class ReviewedInfo(_Model):
    """The git range kimi_review reviewed."""

    range: str
    commits: int = Field(default=0, description="Commits in the range (0: working_tree, staged)")
    files: int = 0
    insertions: int = 0
    deletions: int = 0


class ReviewResult(StructuredResult):
    findings: list[ReviewFinding] = Field(
        default_factory=list, description="Each on a file of the reviewed diff, most serious first"
    )
    verdict: Literal["approve", "request_changes", "comment"] | None = Field(
        default=None, description="null: Kimi's answer did not parse (see raw_response_preview)"
    )
    summary: str = ""
    reviewed: ReviewedInfo | None = None


class ConflictInfo(_Model):
    path: str = Field(description="Relative to the workspace")
    reason: str
    hunks: list[str] = Field(
        default_factory=list, description="The conflicting regions (yours, base, Kimi's)"
    )


class ApplyResult(_Model):
    """What ``kimi_apply`` landed in your tree, or why it landed nothing."""

    success: bool
    job_id: str = ""
    workspace: str = ""
    applied: list[str] = Field(default_factory=list, description="Paths written or deleted in your tree")
    conflicts: list[ConflictInfo] = Field(
        default_factory=list, description="All or nothing: any conflict means nothing was written"
    )
    discarded: bool = Field(default=False, description="kimi_discard: the copy is gone")
    error: ErrorInfo | None = None
    notes: list[str] = Field(default_factory=list)


class JobSummary(_Model):
    """One job, as ``kimi_jobs`` lists it."""

    job_id: str
    tool: str
    workspace: str
    status: JobStatus
    started_at: str = Field(description="ISO 8601, UTC")
    duration_s: float | None = None
    session_id: str | None = Field(default=None, description="kimi_continue(session_id, ...) follows up")
    group: str | None = Field(default=None, description="The group its call named")
    summary: str = Field(default="", description="One line: what was asked, or what came of it")


class JobList(_Model):
    """Recent jobs of every kimi-mcp server sharing this job store, newest first."""

    success: bool = True
    jobs: list[JobSummary] = Field(default_factory=list)
    error: ErrorInfo | None = None


class GroupCancelResult(TaskResult):
    """``kimi_job(action="cancel", group=...)``: which unfinished jobs of the group were cancelled."""

    cancelled: list[str] = Field(
        default_factory=list, description="The job_ids this call cancelled (each stopped, its result kept)"
    )


class PendingJob(_Model):
    """A job ``kimi_wait`` still waits for."""

    job_id: str
    status: JobStatus
    progress: JobProgress | None = None
    question: QuestionInfo | None = Field(
        default=None,
        description="status 'waiting': answer it with kimi_job(job_id, action='answer', answer=...)",
    )
    group: str | None = None


class WaitResult(_Model):
    """What ``kimi_wait`` gathered: the finished jobs' results and where the others stand."""

    success: bool = True
    until: Literal["any", "all"] = "any"
    finished: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Each finished job's whole result as kimi_job returns it (the result budget shared among "
        "them: what was cut is in each one's truncated)",
    )
    pending: list[PendingJob] = Field(default_factory=list, description="The jobs not finished yet")
    timed_out: bool = Field(default=False, description="wait_s passed before the jobs were ready")
    error: ErrorInfo | None = None
    notes: list[str] = Field(default_factory=list)
