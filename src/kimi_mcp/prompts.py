"""Prompt templates sent to Kimi, one per tool.

Structured tools end their prompt with an instruction to answer with ONE fenced ```json block whose shape
is derived from the answer model in :mod:`answers` (:func:`answer_schema_text`), so the prompts and the
parsers cannot drift apart. Read-only tools say so plainly (the approval layer enforces it as well).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from .answers import AnalysisAnswer, ConsultAnswer, DebugAnswer, RefactorAnswer, ReviewAnswer, VerifyAnswer
from .workspace import ContextFile

__all__ = [
    "ANALYSIS_ROLES",
    "CONSULT_ROLES",
    "READ_ONLY_NOTICE",
    "analyze_prompt",
    "answer_schema_text",
    "code_task_prompt",
    "consult_prompt",
    "debug_prompt",
    "fix_prompt",
    "free_prompt",
    "refactor_prompt",
    "review_prompt",
    "verify_prompt",
]

READ_ONLY_NOTICE = (
    "This is a read-only task: do not create, modify or delete files, and do not run shell commands that "
    "change anything; only read and search."
)

_WORKSPACE_ONLY = "Work inside the current directory (the workspace) only."


def _context_block(files: list[ContextFile], heading: str | None = None) -> str:
    if not files:
        return ""
    heading = heading or "Context files (current contents, paths relative to the workspace):"
    parts = ["", heading]
    for item in files:
        parts.append(f'<file path="{item.path}">\n{item.text}\n</file>')
    return "\n".join(parts)


def _assemble(lines: list[str], files_block: str) -> str:
    """Task lines, then a blank line and the file blocks (if any), then a line break before the format."""
    text = "\n".join(lines)
    return (text + "\n" + files_block if files_block else text) + "\n"


def _section(label: str, value: str | None) -> list[str]:
    """An optional labelled paragraph: nothing when the value is empty."""
    return ["", label, value.strip()] if value and value.strip() else []


def _fenced(text: str) -> str:
    """``text`` in a ``` fence longer than any backtick run inside it."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def code_task_prompt(task: str, context: list[ContextFile], constraints: str | None = None) -> str:
    lines = [task.strip()]
    lines += _section("Constraints:", constraints)
    lines += [
        "",
        "Work inside the current directory (the workspace) only. When you are done, answer with a short "
        "summary of what you did.",
    ]
    return "\n".join(lines) + _context_block(context)


def follow_up_prompt(message: str, context: list[ContextFile]) -> str:
    """kimi_continue: the caller's follow-up as is (Kimi has the conversation), plus any files sent along."""
    return message.strip() + _context_block(context)


def free_prompt(prompt: str, workspace_overview: str | None) -> str:
    """kimi_prompt: the caller's prompt as is, plus a listing of the workspace's files when asked for."""
    text = prompt.strip()
    if workspace_overview and workspace_overview.strip():
        text += (
            "\n\nFor orientation, the files in the workspace (the current directory), paths relative to it:\n"
            + workspace_overview.strip()
        )
    return text


def fix_prompt(command: str, exit_code: int | None, output_tail: str, timeout_s: float) -> str:
    """A fix round (``fix_rounds``): the check that failed after Kimi's turn, sent as the conversation's next
    turn; ``output_tail``: the end of its output, already masked and cut; ``exit_code`` None: it timed out
    after ``timeout_s`` seconds."""
    how = f"failed with exit code {exit_code}" if exit_code is not None else f"timed out after {timeout_s:g}s"
    lines = [
        "The check of your work still fails. Fix the cause in the workspace; the check runs again when you are "
        "done.",
        "",
        f"The check (a shell command run in the workspace) {how}:",
        _fenced(command.strip()),
        "",
        "The end of its output:" if output_tail.strip() else "It printed nothing.",
    ]
    if output_tail.strip():
        lines.append(_fenced(output_tail.rstrip("\n")))
    lines += [
        "",
        "Do not weaken, skip or delete the check or its tests to make it pass. When you are done, answer as "
        "the first message of this conversation asked (in the same format), for the whole change so far.",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ answer schemas


def _type_text(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(str(arg) for arg in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_text(arg) for arg in get_args(annotation))
    if origin is list:
        return f"list of {_type_text(get_args(annotation)[0])}"
    names = {str: "string", int: "integer", float: "number", bool: "true | false"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _example_value(annotation: Any, required: bool, description: str | None, path: str, hints: dict) -> Any:
    if get_origin(annotation) is list:
        return [_example_value(get_args(annotation)[0], False, description, path, hints)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _example_object(annotation, path, hints)
    placeholder = f"<{_type_text(annotation)}{', required' if required else ''}>"
    return f"{placeholder} {description}" if description else placeholder


def _example_object(model: type[BaseModel], prefix: str, hints: dict) -> dict[str, Any]:
    example = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        description = hints.get(path) or info.description
        example[name] = _example_value(info.annotation, info.is_required(), description, f"{path}.", hints)
    return example


def answer_schema_text(model: type[BaseModel]) -> str:
    """The JSON example shown in prompts: every field of ``model``, each value a ``"<type> meaning"``
    placeholder (lists show one item). It is valid JSON, derived from the model's fields."""
    hints = getattr(model, "field_hints", {}) or {}
    return json.dumps(_example_object(model, "", hints), indent=2, ensure_ascii=False)


def _answer_format(model: type[BaseModel]) -> str:
    return "\n".join(
        [
            "",
            "Answer format: you may start with a short prose summary; then end your answer with exactly ONE "
            "fenced ```json block holding a single JSON object of this shape, and write nothing after it:",
            "```json",
            answer_schema_text(model),
            "```",
            'Replace every "<...>" placeholder with a real value of the stated type (numbers, true, false and '
            "null without quotes). Keep every key; use an empty string, [] or null when you have nothing to "
            "say. Lists may have any number of items. Valid JSON only: double quotes, no comments, no "
            "trailing commas.",
        ]
    )


# ------------------------------------------------------------------------------------------ write tools


def refactor_prompt(file_path: str, original: str, instructions: str, safety_checks: bool) -> str:
    """kimi_refactor: edit ``file_path`` in place; answer with a :class:`RefactorAnswer`."""
    lines = [
        f"Refactor the file {file_path} in place.",
        "",
        "Instructions:",
        instructions.strip(),
        "",
        "Rules:",
        f"- Edit ONLY {file_path}, in place. Do not create, rename or delete any file, and do not change any "
        "other file.",
    ]
    if safety_checks:
        lines += [
            "- Preserve the external behaviour and the public API (names, signatures, return values, raised "
            "errors, side effects) exactly.",
            "- Keep the existing tests passing; run them if you can.",
            "- Mention every risk that the change alters behaviour under risks, and set behavior_preserved "
            "to false if it might.",
        ]
    else:
        lines.append(
            "- Behaviour may change where the instructions call for it; report such changes under risks."
        )
    lines += ["", _WORKSPACE_ONLY]
    current = _context_block(
        [ContextFile(file_path, original)], "Current contents of the file (path relative to the workspace):"
    )
    return _assemble(lines, current) + _answer_format(RefactorAnswer)


def debug_prompt(error_message: str, files: list[ContextFile], context: str | None) -> str:
    """kimi_debug: find the root cause of the error and fix it; answer with a :class:`DebugAnswer`."""
    lines = [
        "Debug and fix the following error in the workspace.",
        "",
        "Error:",
        _fenced(error_message.strip()),
    ]
    lines += _section("Background (what was being done, what was tried):", context)
    lines += [
        "",
        "Steps:",
        "1. Reproduce the error if you can.",
        "2. Find the root cause, not just the place where the symptom shows.",
        "3. FIX it by editing the files in the workspace; keep the fix minimal and focused.",
        "4. Check the fix (re-run the failing command or the tests if you can).",
        "List every file you changed under code_changes.",
        "",
        _WORKSPACE_ONLY,
    ]
    block = _context_block(files, "Relevant files (current contents, paths relative to the workspace):")
    return _assemble(lines, block) + _answer_format(DebugAnswer)


# ------------------------------------------------------------------------------------------ read-only tools

ANALYSIS_ROLES: dict[str, tuple[str, str]] = {
    "general": (
        "a senior engineer doing a general code review",
        "correctness and bugs, error handling, edge cases, readability, naming and duplication",
    ),
    "security": (
        "an application security reviewer",
        "injection (SQL, shell, templates), authentication and authorisation, secrets in code, unsafe "
        "deserialisation, path traversal, input validation, cryptography misuse and data exposure",
    ),
    "performance": (
        "a performance engineer",
        "algorithmic complexity, hot loops, unnecessary I/O and allocations, N+1 queries, blocking calls "
        "in async code, caching opportunities and memory use",
    ),
    "maintainability": (
        "a maintainability reviewer",
        "structure, coupling and cohesion, naming, duplication, dead code, complexity, documentation and "
        "how safely the code can be changed",
    ),
    "testing": (
        "a test engineer",
        "what is tested and what is not, missing edge cases, test quality and isolation, flaky patterns, "
        "and concrete tests worth adding",
    ),
    "architecture": (
        "a software architect",
        "module boundaries, dependencies and layering, responsibilities, data flow, extension points and "
        "design decisions that will be costly to change",
    ),
}


def analyze_prompt(files: list[ContextFile], focus: str | None, role: str) -> str:
    """kimi_analyze_code (read-only): analyse the files; answer with an :class:`AnalysisAnswer`."""
    key = role.strip().lower() if isinstance(role, str) else "general"
    persona, lens = ANALYSIS_ROLES.get(key, ANALYSIS_ROLES["general"])
    lines = [
        f"Analyse the code below as {persona}. Look at: {lens}.",
    ]
    lines += _section("Focus in particular on:", focus)
    lines += [
        "",
        READ_ONLY_NOTICE,
        "",
        "Base every suggestion on the code itself, give the file and the 1-based line number it refers to, "
        "and a severity (critical, high, medium, low or info). Most important first.",
    ]
    block = _context_block(files, "Files to analyse (current contents, paths relative to the workspace):")
    return _assemble(lines, block) + _answer_format(AnalysisAnswer)


def verify_prompt(requirements: str, files: list[ContextFile], extra: str | None) -> str:
    """kimi_verify (read-only): check each requirement against the code; answer with a :class:`VerifyAnswer`."""
    lines = [
        "Verify whether the code meets the requirements below.",
        "",
        "Requirements:",
        requirements.strip(),
    ]
    lines += _section("Additional instructions:", extra)
    lines += [
        "",
        READ_ONLY_NOTICE,
        "",
        "Check each requirement separately against the code and give one finding per requirement, with "
        "file:line evidence (a file and its 1-based line number). Do not assume: without evidence in the "
        "code, the status is unknown. Status: met, unmet, partial or unknown. Verdict: pass only if every "
        "requirement is met; fail if none is fully met; partial otherwise. List every requirement that is "
        "not fully met under unmet_requirements.",
    ]
    block = _context_block(files, "Files to check (current contents, paths relative to the workspace):")
    return _assemble(lines, block) + _answer_format(VerifyAnswer)


CONSULT_ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "skeptic": (
        "You are a skeptic. Your job is to find the flaws, risks and hidden costs in what is proposed and to "
        "challenge its assumptions, not to agree. Look for failure modes, edge cases, operational and "
        "security risks, and goals the proposal does not actually meet; say what would change your mind.",
        ("proposal", "goals", "constraints", "known_risks"),
    ),
    "architect": (
        "You are a software architect. Weigh the design options and their trade-offs (complexity, "
        "reliability, performance, maintainability, cost, migration effort) against the requirements, and "
        "recommend a design, saying why and what it costs.",
        ("requirements", "alternatives"),
    ),
    "debugger": (
        "You are an expert debugger. From the symptoms, give hypotheses about the cause ranked by "
        "likelihood, and for each say how to confirm or rule it out (a check in the code, a command, a log "
        "line to look for). Do not repeat what was already tried.",
        ("symptoms", "repro", "logs", "tried"),
    ),
    "judge": (
        "You are an impartial judge. Decide between the options against the criteria: weigh each option "
        "against each criterion, then say which option you choose and why, and what would make you choose "
        "differently.",
        ("options", "criteria"),
    ),
}

_CONTEXT_LABELS = {
    "proposal": "Proposal",
    "goals": "Goals",
    "constraints": "Constraints",
    "known_risks": "Known risks",
    "requirements": "Requirements",
    "alternatives": "Alternatives under consideration",
    "symptoms": "Symptoms",
    "repro": "How to reproduce",
    "logs": "Logs",
    "tried": "Already tried",
    "options": "Options",
    "criteria": "Criteria",
}


def _is_empty(value: object) -> bool:
    return value is None or (isinstance(value, str | list | tuple | dict) and not value)


def _render_list(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list | tuple):
        return "\n".join(f"- {_render_value(item)}" for item in value if not _is_empty(item))
    return _render_value(value)


def _render_value(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping):
        return "\n".join(
            f"{key}: {_render_value(item)}" for key, item in value.items() if not _is_empty(item)
        )
    if isinstance(value, list | tuple):
        return _render_list(value)
    return str(value)


def _render_options(options: object) -> str:
    if not isinstance(options, list | tuple):
        return _render_value(options)
    parts = []
    for number, option in enumerate(options, 1):
        if not isinstance(option, Mapping):
            parts.append(f"Option {number}: {_render_value(option)}")
            continue
        lines = [f"Option {number}: {_render_value(option.get('name') or '(unnamed)')}"]
        for key, label in (("pros", "Pros"), ("cons", "Cons")):
            if not _is_empty(option.get(key)):
                lines += [f"{label}:", _render_list(option[key])]
        for key, item in option.items():
            if key not in ("name", "pros", "cons") and not _is_empty(item):
                lines.append(f"{key}: {_render_value(item)}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _render_exchange(prior_exchange: list[dict[str, str]]) -> str:
    turns = []
    for index, turn in enumerate(prior_exchange):
        speaker = str(turn.get("role", "")).strip().lower() if isinstance(turn, Mapping) else ""
        if speaker not in ("user", "kimi"):
            raise ValueError(f"prior_exchange[{index}].role must be 'user' or 'kimi'")
        content = _render_value(turn.get("content") or "")
        turns.append(f'<turn role="{speaker}">\n{content}\n</turn>')
    return "\n".join(turns)


def consult_prompt(
    role: str, message: str, context: dict[str, object], prior_exchange: list[dict[str, str]] | None
) -> str:
    """kimi_consult (read-only): answer ``message`` in a role; answer with a :class:`ConsultAnswer`.

    Only the context keys given are rendered (the role's own keys first); ``context["files"]`` holds
    pre-rendered ``<file>`` blocks. ``prior_exchange`` makes this a follow-up round. Raises ValueError for
    an unknown role or a malformed prior exchange.
    """
    key = role.strip().lower() if isinstance(role, str) else ""
    if key not in CONSULT_ROLES:
        raise ValueError(f"unknown consult role {role!r}; valid roles: {', '.join(CONSULT_ROLES)}")
    if not isinstance(message, str) or not message.strip():
        raise ValueError("message is empty")
    persona, role_keys = CONSULT_ROLES[key]
    context = dict(context or {})
    files = context.pop("files", None)
    order = [*role_keys, *(k for k in _CONTEXT_LABELS if k not in role_keys), *context]
    lines = [persona, "", READ_ONLY_NOTICE]
    seen = set()
    for name in order:
        if name in seen or name not in context or _is_empty(context[name]):
            continue
        seen.add(name)
        value = context[name]
        label = _CONTEXT_LABELS.get(name) or name.replace("_", " ").capitalize()
        text = _render_options(value) if name == "options" else _render_value(value)
        lines += ["", f"{label}:", text]
    if not _is_empty(files):
        lines += ["", "Files (current contents, paths relative to the workspace):", _render_value(files)]
    if prior_exchange:
        lines += [
            "",
            "This is a follow-up round. The earlier rounds of this consultation, oldest first (kimi is you):",
            _render_exchange(prior_exchange),
            "",
            "Follow-up message (build on the earlier rounds; do not repeat yourself):",
        ]
    else:
        lines += ["", "Message:"]
    lines.append(message.strip())
    return "\n".join(lines) + "\n" + _answer_format(ConsultAnswer)


_REVIEWED = {"working_tree": "the uncommitted changes of the working tree (untracked files included)",
             "staged": "the staged changes (the index against HEAD)"}  # fmt: skip


def review_prompt(
    range_: str,
    subjects: list[str],
    diff: str,
    focus: str | None,
    *,
    not_shown: list[str] | None = None,
    withheld: list[str] | None = None,
) -> str:
    """kimi_review (read-only): review a git range's ``diff``; answer with a :class:`ReviewAnswer`.
    ``not_shown``: changed files whose diff did not fit in the message; ``withheld``: secret files."""
    what = _REVIEWED.get(range_, f"the git range {range_}")
    lines = [f"Review {what} as a senior engineer: the diff is below, paths relative to the workspace."]
    if subjects:
        lines += ["", "Commits in the range (newest first):", *subjects]
    lines += _section("Focus in particular on:", focus)
    lines += [
        "",
        READ_ONLY_NOTICE,
        "",
        "Look for bugs, security problems, missing error handling and edge cases, missing tests and unclear "
        "code in what changed; read the files in the workspace when the diff alone is not enough. Report only "
        "problems in the files of the diff, each with its file, the 1-based line number in the file's new "
        "version, a severity (critical, major, minor or nit), a title, the detail and a suggestion; most "
        "serious first. Verdict: request_changes if anything critical or major must be fixed first, approve if "
        "nothing needs fixing, comment otherwise.",
    ]
    if not_shown:
        lines += ["", "Also changed, their diff not shown (too large for one message; read them if needed):"]
        lines += [f"- {path}" for path in not_shown]
    if withheld:
        lines += ["", "Also changed, secret files (contents withheld; do not read them):"]
        lines += [f"- {path}" for path in withheld]
    lines += ["", "The diff:", _fenced(diff.rstrip("\n")) if diff.strip() else "(no diff shown)"]
    return "\n".join(lines) + "\n" + _answer_format(ReviewAnswer)
