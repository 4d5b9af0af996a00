"""Kimi's ``AskUserQuestion`` tool as plain data: the questions a call asks, and a caller's validated answer.

The model calls ``AskUserQuestion`` with ``{"questions": [{"question", "header", "options": [{"label",
"description"}], "multi_select"}]}`` (1–4 questions, 2–4 options each); both Kimi TUIs then show a panel
that lists the options plus an "Other" option of their own for a free-text answer (measured on kimi-cli
1.50.0 and Kimi Code 2.1.0, see docs/kimi-dialects.md). A driver turns a :class:`Choice` into keystrokes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import BadInput
from .message import guard_placeholders, one_line

__all__ = ["MAX_FREE_TEXT", "Choice", "Option", "Question", "choice_for", "questions_of"]

#: the longest free-text answer typed into the panel's "Other" input (characters)
MAX_FREE_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Option:
    label: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    header: str = ""
    options: tuple[Option, ...] = ()
    multi_select: bool = False
    #: the panel offers a free-text answer ("Other"): both dialects add it to every question
    free_text: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.text,
            "header": self.header,
            "options": [{"label": o.label, "description": o.description} for o in self.options],
            "multi_select": self.multi_select,
            "free_text": self.free_text,
        }


@dataclass(frozen=True, slots=True)
class Choice:
    """An answer to one question: the 0-based indexes of the options picked (sorted), and/or free text
    (one line, typed into the panel's "Other" input)."""

    picks: tuple[int, ...] = ()
    text: str | None = None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _option(item: Any) -> Option | None:
    if isinstance(item, str):
        return Option(item.strip()) if item.strip() else None
    if not isinstance(item, dict):
        return None
    label = _text(item.get("label"))
    return Option(label, _text(item.get("description"))) if label else None


def questions_of(arguments: str | dict[str, Any]) -> list[Question]:
    """The questions of an ``AskUserQuestion`` call's arguments (JSON text or already decoded). Never raises:
    malformed input gives what could be read (entries without question text are skipped, options without
    a label too)."""
    data: Any = arguments
    if isinstance(arguments, str | bytes):
        try:
            data = json.loads(arguments)
        except (ValueError, TypeError):
            return []
    if not isinstance(data, dict):
        return []
    items = data.get("questions")
    if not isinstance(items, list):
        return []
    questions = []
    for item in items:
        if not isinstance(item, dict) or not _text(item.get("question")):
            continue
        raw = item.get("options")
        options = tuple(o for o in map(_option, raw if isinstance(raw, list) else []) if o is not None)
        multi = item.get("multi_select", item.get("multiSelect"))
        questions.append(
            Question(
                text=_text(item.get("question")),
                header=_text(item.get("header")),
                options=options,
                multi_select=multi is True,
            )
        )
    return questions


def _labels(question: Question) -> str:
    return ", ".join(repr(o.label) for o in question.options)


def _error(question: Question, problem: str, suggestion: str) -> BadInput:
    return BadInput(
        f"{problem} for the question {question.text!r}; its options are {_labels(question)}"
        + (" (or free text)" if question.free_text else ""),
        details={
            "question": question.text,
            "options": [o.label for o in question.options],
            "multi_select": question.multi_select,
            "free_text": question.free_text,
        },
        suggestion=suggestion,
    )


def _index(question: Question, label: str) -> int | None:
    wanted = label.strip().casefold()
    return next((i for i, o in enumerate(question.options) if o.label.strip().casefold() == wanted), None)


def choice_for(question: Question, answer: str | list[str]) -> Choice:
    """The caller's ``answer`` checked against ``question``: an option's label (case-insensitive, surrounding
    whitespace ignored), a list of labels (multi-select questions only), or else free text (when the
    question offers it; a list is never free text). Raises ``BadInput`` naming the options."""
    examples = [repr(o.label) for o in question.options[:2]] or ["'…'"]
    pick_hint = (
        f"Answer with a list of option labels, e.g. [{', '.join(examples)}]."
        if question.multi_select
        else f"Answer with one option label, e.g. {examples[0]}."
    )
    if isinstance(answer, list):
        if not question.multi_select:
            raise _error(question, "a list of labels answers only a multi-select question", pick_hint)
        if not answer:
            raise _error(question, "the list of labels is empty", pick_hint)
        picks: list[int] = []
        for label in answer:
            index = _index(question, label) if isinstance(label, str) else None
            if index is None:
                raise _error(question, f"{label!r} is not one of the options", pick_hint)
            if index in picks:
                raise _error(question, f"{label!r} is listed twice", "Name each option once.")
            picks.append(index)
        return Choice(picks=tuple(sorted(picks)))
    if not isinstance(answer, str):
        kind = type(answer).__name__
        raise _error(question, f"an answer must be a label or a list of labels, not {kind}", pick_hint)
    index = _index(question, answer)
    if index is not None:
        return Choice(picks=(index,))
    if not question.free_text:
        raise _error(question, f"{answer!r} is not one of the options", pick_hint)
    text = " ".join(one_line(answer).split())
    if not text:
        raise _error(question, "the answer is empty", pick_hint + " Or write a free-text answer.")
    if len(text) > MAX_FREE_TEXT:
        raise _error(
            question,
            f"the free-text answer is {len(text):,} characters, over the {MAX_FREE_TEXT:,} the panel takes",
            "Shorten the answer (one line).",
        )
    return Choice(text=guard_placeholders(text))
