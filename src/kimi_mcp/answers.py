"""Kimi's structured answers: find the JSON object in its final text and parse it leniently.

The structured tools ask Kimi to end its answer with ONE fenced ```json block (see :mod:`prompts`). Models
do not always comply exactly, so :func:`extract_json` looks for the object in this order:

1. fenced blocks (```json, ```jsonc, ``` without a language, ~~~ fences); the LAST block whose body is a
   JSON object wins (a block whose body is not JSON as a whole is scanned for objects inside it);
2. otherwise bare objects in the text, found by a scanner that respects JSON strings and escapes; the LAST
   complete top-level object wins (not the largest: the model is asked to end with its answer, and an
   earlier larger object is more likely quoted input than the answer). Objects nested in another object
   or in a JSON array are never returned on their own (an array is not the object asked for), and a value
   left open at the end of the text (truncated output) ends the scan, so a truncated answer yields an
   earlier valid object or ``None``, never a fragment;
3. cheap, safe repairs of common slips when a candidate does not parse: a BOM, trailing commas before
   ``}``/``]``, typographic quotes used as string delimiters, Python's ``True``/``False``/``None``. Every
   repair leaves the inside of JSON strings alone; nothing is ever evaluated.

Only the last :data:`MAX_SCAN_CHARS` characters are scanned (the answer is at the end), and the scan is
linear: each character is visited a bounded number of times, strings are skipped with a single regex match.

:func:`parse_answer` validates candidates against an answer model, in the same order of preference, and
returns the first that fits (so a trailing example object in the prose does not hide the real answer).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from .models import Finding, ReviewFinding, Suggestion

__all__ = [
    "MAX_CANDIDATES",
    "MAX_SCAN_CHARS",
    "AnalysisAnswer",
    "ConsultAnswer",
    "DebugAnswer",
    "FileChange",
    "RefactorAnswer",
    "ReviewAnswer",
    "VerifyAnswer",
    "extract_json",
    "iter_json_objects",
    "parse_answer",
    "preview",
]

MAX_SCAN_CHARS = 2_000_000
MAX_CANDIDATES = 200  # parse_answer validates at most this many candidate objects

T = TypeVar("T", bound=BaseModel)

# ------------------------------------------------------------------------------------- JSON extraction

_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")
_VALUE_START = re.compile(r'\{\s*["\u201c}]|\[\s*\{')  # an object, or an array of objects
_STRUCTURAL = re.compile(r'[{}\[\]"]')
_STRING_TAIL = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # the rest of a string, after its opening quote
_REPAIR = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"'  # a well-formed string: kept as is
    r"|\u201c[^\u201c\u201d\n]*\u201d"  # a “typographic” string
    r"|[\u201c\u201d]"  # a stray typographic quote
    r"|,(?=\s*[}\]])"  # a trailing comma
    r"|\b(?:True|False|None)\b",  # Python literals
    re.S,
)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _repair_token(match: re.Match[str]) -> str:
    token = match.group(0)
    if token.startswith('"'):
        return token
    if token.startswith("\u201c") and len(token) > 1:
        return json.dumps(token[1:-1], ensure_ascii=False)
    if token in ("\u201c", "\u201d"):
        return '"'
    if token == ",":
        return ""
    return _PY_LITERALS[token]


def _loads(text: str) -> tuple[bool, Any]:
    """(is JSON, value): ``text`` parsed as JSON, repairing common slips if it does not parse as is."""
    text = text.strip().lstrip("\ufeff").strip()
    if not text.startswith(("{", "[")):
        return False, None
    attempts = [text]
    repaired = _REPAIR.sub(_repair_token, text)
    if repaired != text:
        attempts.append(repaired)
    for attempt in attempts:
        try:
            return True, json.loads(attempt)
        except (ValueError, RecursionError):
            continue
    return False, None


def _loads_dict(text: str) -> dict[str, Any] | None:
    ok, value = _loads(text)
    return value if ok and isinstance(value, dict) else None


def _object_end(text: str, start: int) -> tuple[int | None, bool]:
    """Scan the object (or array) opening at ``start``: (index after its closing bracket, balanced?).

    ``(None, False)`` when the text ends first (truncated); ``(i, False)`` when a bracket does not match,
    ``i`` being the index after the offending one.
    """
    stack: list[str] = []
    pos = start
    while True:
        match = _STRUCTURAL.search(text, pos)
        if match is None:
            return None, False
        char, at = match.group(0), match.start()
        if char == '"':
            tail = _STRING_TAIL.match(text, at + 1)
            if tail is None:
                return None, False
            pos = tail.end()
            continue
        if char in "{[":
            stack.append(char)
        else:
            opener = stack.pop()
            if (opener == "{") != (char == "}"):
                return at + 1, False
            if not stack:
                return at + 1, True
        pos = at + 1


def _object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced top-level ``{...}`` in ``text``, in order.

    A JSON array of objects is one top-level value, not several objects: it is skipped as a whole.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        match = _VALUE_START.search(text, pos)
        if match is None:
            return spans
        start = match.start()
        end, balanced = _object_end(text, start)
        if end is None:
            return spans  # open until the end: truncated output, everything after it is inside it
        if text[start] == "[":
            # a real JSON array is skipped whole; brackets that are not one may hold objects
            pos = end if balanced and _loads(text[start:end])[0] else start + 1
            continue
        if balanced:
            spans.append((start, end))
        pos = end


def _bare_objects_reversed(text: str) -> Iterator[dict[str, Any]]:
    """The complete top-level JSON objects in ``text``, last first (parsed lazily)."""
    for start, end in reversed(_object_spans(text)):
        value = _loads_dict(text[start:end])
        if value is not None:
            yield value


def _fenced_bodies(text: str) -> Iterator[str]:
    """Bodies of fenced blocks that may hold JSON (language json*, or none), in order."""
    lines = text.split("\n")
    count = len(lines)
    index = 0
    while index < count:
        opening = _FENCE_OPEN.match(lines[index].rstrip("\r"))
        index += 1
        if opening is None:
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        jsonish = language == "" or language.startswith("json")
        body: list[str] = []
        while index < count:
            line = lines[index].rstrip("\r")
            index += 1
            stripped = line.strip()
            if stripped and stripped.count(fence[0]) == len(stripped) and len(stripped) >= len(fence):
                break
            content = stripped.rstrip(fence[0])
            if jsonish and len(stripped) - len(content) >= 3 and content.rstrip().endswith(("}", "]")):
                body.append(content)  # `}```` closing the block on the body's last line
                break
            body.append(line)
        if jsonish:
            yield "\n".join(body)


def iter_json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Candidate JSON objects in ``text``, most preferred first (see the module docstring). Never raises."""
    if not isinstance(text, str) or "{" not in text:
        return
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]
    text = text.replace("\ufeff", "")
    for body in reversed(list(_fenced_bodies(text))):
        is_json, value = _loads(body)
        if isinstance(value, dict):
            yield value
        elif not is_json:  # prose or broken JSON in the block: look for objects inside it
            yield from _bare_objects_reversed(body)
    yield from _bare_objects_reversed(text)


def extract_json(text: str) -> dict[str, Any] | None:
    """The JSON object Kimi was asked for: the last fenced one, else the last bare one; ``None`` if none."""
    try:
        return next(iter_json_objects(text), None)
    except Exception:  # documented never to raise
        return None


# ------------------------------------------------------------------------------------ lenient coercion


def _text(value: Any) -> str:
    """Any JSON value as text: lists become lines, objects ``key: value`` lines, null the empty string."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "\n".join(part for part in (_text(item) for item in value) if part)
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_text(item)}" for key, item in value.items() if _text(item))
    return str(value)


_PLACEHOLDER = re.compile(r"<string(?:, required)?>")  # as in the prompts' JSON example


def _required_text(value: Any) -> str:
    text = _text(value)
    if not text:
        raise ValueError("must be a non-empty text")
    if _PLACEHOLDER.match(text):
        raise ValueError("is the example's placeholder, not an answer")
    return text


def _one_line(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{key}: {_text(item)}" for key, item in value.items() if _text(item))
    return _text(value)


def _text_list(value: Any) -> list[str]:
    """A list of strings from a list, a single string (-> ``[string]``), an object or null."""
    if value is None:
        return []
    if isinstance(value, dict):
        items: list[Any] = [f"{key}: {_text(item)}" for key, item in value.items()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        items = [value]
    return [text for text in (_one_line(item) for item in items) if text]


def _optional_bool(value: Any) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "y", "1"):
            return True
        if word in ("false", "no", "n", "0"):
            return False
    return None


_LINE = re.compile(r"(?:line\s*|l)?(\d+)(?:\s*[-\u2013:,]\s*\d+)?", re.I)
_FILE_LINE = re.compile(r"^(.+?):(\d+)(?::\d+)?$")


def _optional_line(value: Any) -> int | None:
    """A 1-based line number from 42, 42.0, "42", "L42", "line 42" or "42-50"; ``None`` otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        match = _LINE.fullmatch(value.strip())
        value = int(match.group(1)) if match else None
    return value if isinstance(value, int) and value >= 1 else None


def _pick(item: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if item.get(key) not in (None, ""):
            return item[key]
    return None


def _file_and_line(item: dict[str, Any]) -> tuple[str | None, int | None]:
    file = _text(_pick(item, "file", "path", "filename", "file_path", "location")) or None
    line = _optional_line(_pick(item, "line", "line_number", "lineno", "start_line"))
    if file is not None:
        match = _FILE_LINE.match(file)
        if match and line is None:
            file, line = match.group(1), _optional_line(match.group(2))
    return file, line


_SEVERITIES = {"info", "low", "medium", "high", "critical"}
_SEVERITY_SYNONYMS = {"informational": "info", "minor": "low", "moderate": "medium", "major": "high"}


def _severity(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    word = value.strip().lower()
    word = _SEVERITY_SYNONYMS.get(word, word)
    return word if word in _SEVERITIES else None


def _as_items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _suggestions(value: Any) -> list[Suggestion]:
    result = []
    for item in _as_items(value):
        if isinstance(item, str):
            if item.strip():
                result.append(Suggestion(title=item.strip()))
            continue
        if not isinstance(item, dict):
            continue
        file, line = _file_and_line(item)
        title = _text(_pick(item, "title", "summary", "name", "issue"))
        detail = _text(_pick(item, "detail", "details", "description", "message", "recommendation"))
        if not (title or detail):
            continue
        result.append(
            Suggestion(
                title=title,
                detail=detail,
                file=file,
                line=line,
                severity=_severity(_pick(item, "severity", "priority", "level")),  # type: ignore[arg-type]
            )
        )
    return result


_STATUS_WORDS = {
    "met": ("met", "pass", "passed", "ok", "yes", "true", "satisfied", "fulfilled", "done", "implemented"),
    "unmet": ("unmet", "not met", "fail", "failed", "no", "false", "missing", "unsatisfied", "not satisfied"),
    "partial": ("partial", "partially", "partly", "partially met", "partially satisfied"),
}
_STATUS = {word: status for status, words in _STATUS_WORDS.items() for word in words}


def _status(value: Any) -> str:
    if isinstance(value, bool):
        return "met" if value else "unmet"
    if not isinstance(value, str):
        return "unknown"
    word = " ".join(value.strip().lower().replace("_", " ").replace("-", " ").split())
    return _STATUS.get(word, "unknown")


def _findings(value: Any) -> list[Finding]:
    result = []
    for item in _as_items(value):
        if isinstance(item, str):
            if item.strip():
                result.append(Finding(requirement=item.strip()))
            continue
        if not isinstance(item, dict):
            continue
        file, line = _file_and_line(item)
        result.append(
            Finding(
                requirement=_text(_pick(item, "requirement", "name", "requirement_text", "title")),
                status=_status(_pick(item, "status", "result", "met")),  # type: ignore[arg-type]
                file=file,
                line=line,
                detail=_text(_pick(item, "detail", "details", "evidence", "explanation", "description")),
            )
        )
    return result


class FileChange(BaseModel):
    """One file Kimi says it changed (the tool adds the real diff)."""

    model_config = ConfigDict(extra="ignore")

    path: Annotated[str, BeforeValidator(_required_text)]
    description: Annotated[str, BeforeValidator(_text)] = ""


_PATH_AND_NOTE = re.compile(r"^(\S+?):\s+(.+)$", re.S)


def _file_changes(value: Any) -> list[FileChange]:
    result = []
    for item in _as_items(value):
        if isinstance(item, str):
            match = _PATH_AND_NOTE.match(item.strip())
            path, description = (match.group(1), match.group(2)) if match else (item.strip(), "")
        elif isinstance(item, dict):
            path = _text(_pick(item, "path", "file", "filename", "file_path"))
            description = _text(_pick(item, "description", "desc", "change", "summary", "details", "detail"))
        else:
            continue
        if path:
            result.append(FileChange(path=path, description=description))
    return result


_VERDICTS = {
    "pass": "pass",
    "passed": "pass",
    "ok": "pass",
    "fail": "fail",
    "failed": "fail",
    "partial": "partial",
}


def _verdict(value: Any) -> str:
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in _VERDICTS:
        raise ValueError(f"verdict must be pass, fail or partial, not {value!r}")
    return _VERDICTS[word]


_CONFIDENCE_WORDS = {"high": 0.85, "medium": 0.6, "moderate": 0.6, "low": 0.3}


def _confidence(value: Any) -> float | None:
    """0.8, "0.8", 80, "80%" -> 0.8; "high"/"medium"/"low" -> 0.85/0.6/0.3; anything else -> ``None``."""
    if value is None or isinstance(value, bool):
        return None
    percent = False
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _CONFIDENCE_WORDS:
            return _CONFIDENCE_WORDS[word]
        percent = word.endswith("%")
        try:
            value = float(word.rstrip("%").strip())
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    number = float(value)
    if percent or 1 < number <= 100:
        number /= 100
    return number if 0 <= number <= 1 else None


Text = Annotated[str, BeforeValidator(_text)]
MainText = Annotated[str, BeforeValidator(_required_text)]
TextList = Annotated[list[str], BeforeValidator(_text_list)]


# ------------------------------------------------------------------------------------------ answer models


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    #: the field that must be present (and non-empty) for the answer to count as parsed
    main_field: ClassVar[str]
    #: descriptions of nested fields ("list_field.sub_field"), shown in the prompt's JSON example
    field_hints: ClassVar[dict[str, str]] = {}


class RefactorAnswer(_Answer):
    main_field: ClassVar[str] = "explanation"

    explanation: MainText = Field(description="what you changed and why, in a few sentences")
    behavior_preserved: Annotated[bool | None, BeforeValidator(_optional_bool)] = Field(
        default=None, description="true if external behaviour is unchanged, false if not, null if unsure"
    )
    risks: TextList = Field(default_factory=list, description="a way the change could break something")


class DebugAnswer(_Answer):
    main_field: ClassVar[str] = "diagnosis"
    field_hints: ClassVar[dict[str, str]] = {
        "code_changes.path": "file you changed, relative to the workspace",
        "code_changes.description": "what you changed in it",
    }

    diagnosis: MainText = Field(description="what is going wrong, in plain words")
    root_cause: Text = Field(default="", description="the underlying cause, with file:line")
    solution: Text = Field(default="", description="how you fixed it and how you checked the fix")
    code_changes: Annotated[list[FileChange], BeforeValidator(_file_changes)] = Field(default_factory=list)


class AnalysisAnswer(_Answer):
    main_field: ClassVar[str] = "analysis"
    field_hints: ClassVar[dict[str, str]] = {
        "suggestions.title": "short name of the issue",
        "suggestions.detail": "what is wrong, why it matters and what to do",
        "suggestions.file": "path relative to the workspace",
        "suggestions.line": "1-based line number",
    }

    analysis: MainText = Field(description="your overall assessment, in a few paragraphs at most")
    suggestions: Annotated[list[Suggestion], BeforeValidator(_suggestions)] = Field(default_factory=list)


class VerifyAnswer(_Answer):
    main_field: ClassVar[str] = "verdict"
    field_hints: ClassVar[dict[str, str]] = {
        "findings.requirement": "the requirement, as stated",
        "findings.file": "file with the evidence, relative to the workspace",
        "findings.line": "1-based line number of the evidence",
        "findings.detail": "why, citing the code",
    }

    verdict: Annotated[Literal["pass", "fail", "partial"], BeforeValidator(_verdict)] = Field(
        description="pass: every requirement met; fail: none fully met; partial: anything in between"
    )
    findings: Annotated[list[Finding], BeforeValidator(_findings)] = Field(default_factory=list)
    unmet_requirements: TextList = Field(default_factory=list, description="a requirement not fully met")


class ConsultAnswer(_Answer):
    main_field: ClassVar[str] = "response"

    response: MainText = Field(description="your answer to the message, in your role")
    key_risks: TextList = Field(default_factory=list, description="a risk, most serious first")
    assumptions: TextList = Field(default_factory=list, description="an assumption you (or the plan) rely on")
    alternatives: TextList = Field(default_factory=list, description="an alternative worth considering")
    confidence: Annotated[float | None, BeforeValidator(_confidence)] = Field(
        default=None, description="how sure you are, from 0 to 1"
    )
    evidence: TextList = Field(default_factory=list, description="file:line or fact you checked")


_REVIEW_SEVERITIES = {
    **dict.fromkeys(("critical", "blocker", "blocking", "severe"), "critical"),
    **dict.fromkeys(("major", "high", "error", "important", "serious"), "major"),
    **dict.fromkeys(("minor", "medium", "moderate", "warning", "low"), "minor"),
    **dict.fromkeys(("nit", "nitpick", "trivial", "info", "informational", "style", "suggestion"), "nit"),
}


def _review_findings(value: Any) -> list[ReviewFinding]:
    """Review findings: each with a file (a finding without one is not kept); severity words mapped to
    critical / major / minor / nit (unknown or missing: minor)."""
    result = []
    for item in _as_items(value):
        if not isinstance(item, dict):
            continue
        file, line = _file_and_line(item)
        title = _text(_pick(item, "title", "summary", "name", "issue"))
        detail = _text(_pick(item, "detail", "details", "description", "message", "explanation"))
        if not file or not (title or detail):
            continue
        word = _text(_pick(item, "severity", "priority", "level")).lower()
        result.append(
            ReviewFinding(
                file=file,
                line=line,
                severity=_REVIEW_SEVERITIES.get(word, "minor"),
                title=title,  # type: ignore[arg-type]
                detail=detail,
                suggestion=_text(_pick(item, "suggestion", "fix", "recommendation")),
            )  # fmt: skip
        )
    return result


_REVIEW_VERDICTS = {
    **dict.fromkeys(("approve", "approved", "lgtm", "accept", "accepted", "pass"), "approve"),
    **dict.fromkeys(
        ("request_changes", "changes_requested", "reject", "rejected", "needs_work"), "request_changes"
    ),
    **dict.fromkeys(("comment", "commented", "neutral"), "comment"),
}


def _review_verdict(value: Any) -> str:
    word = "_".join(value.strip().lower().replace("-", " ").split()) if isinstance(value, str) else ""
    if word not in _REVIEW_VERDICTS:
        raise ValueError(f"verdict must be approve, request_changes or comment, not {value!r}")
    return _REVIEW_VERDICTS[word]


class ReviewAnswer(_Answer):
    main_field: ClassVar[str] = "verdict"
    field_hints: ClassVar[dict[str, str]] = {
        "findings.file": "a file of the diff, path relative to the workspace",
        "findings.line": "1-based line number in the file's new version",
        "findings.severity": "how serious: critical blocks the merge, nit is cosmetic",
        "findings.title": "short name of the problem",
        "findings.detail": "what is wrong and why it matters",
        "findings.suggestion": "what to do instead",
    }

    verdict: Annotated[Literal["approve", "request_changes", "comment"], BeforeValidator(_review_verdict)] = (
        Field(description="approve: fine to merge; request_changes: must be fixed first; comment: neither")
    )
    summary: Text = Field(default="", description="your overall assessment of the change, in a few sentences")
    findings: Annotated[list[ReviewFinding], BeforeValidator(_review_findings)] = Field(default_factory=list)


# ------------------------------------------------------------------------------------------ entry points


def parse_answer(text: str, model: type[T]) -> tuple[T | None, dict[str, Any] | None]:
    """(parsed answer or ``None``, the raw JSON object or ``None``). Never raises.

    Candidates are tried in :func:`iter_json_objects` order (at most :data:`MAX_CANDIDATES`); the first that
    validates wins. An object whose only value is an object, like ``{"answer": {...}}``, is also tried
    unwrapped. On failure the raw object is the preferred candidate (what :func:`extract_json` returns).
    """
    first: dict[str, Any] | None = None
    try:
        for count, candidate in enumerate(iter_json_objects(text)):
            if count >= MAX_CANDIDATES:
                break
            if first is None:
                first = candidate
            attempts = [candidate]
            if len(candidate) == 1 and isinstance(inner := next(iter(candidate.values())), dict):
                attempts.append(inner)
            for attempt in attempts:
                try:
                    return model.model_validate(attempt), attempt
                except Exception:  # ValidationError, or anything a validator let through
                    continue
    except Exception:  # documented never to raise
        pass
    return None, first


def preview(text: str, limit: int = 2000) -> str:
    """The start of Kimi's raw answer, marked ``… [N more chars]`` when cut."""
    if not text:
        return ""
    limit = max(limit, 0)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"
