"""Kimi's questions (its AskUserQuestion panel) as plain data, and a caller's answer checked against one.

Placeholder until the measured version lands (branch ``panels``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import BadInput


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
    free_text: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "header": self.header,
            "options": [{"label": o.label, "description": o.description} for o in self.options],
            "multi_select": self.multi_select,
        }


@dataclass(frozen=True, slots=True)
class Choice:
    picks: tuple[int, ...] = ()
    text: str | None = None


def questions_of(arguments: str | dict) -> list[Question]:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return []
    out = []
    for q in (args or {}).get("questions") or []:
        if not isinstance(q, dict):
            continue
        options = tuple(
            Option(str(o.get("label", "")), str(o.get("description") or ""))
            for o in q.get("options") or []
            if isinstance(o, dict)
        )
        out.append(
            Question(
                str(q.get("question", "")), str(q.get("header") or ""), options, bool(q.get("multi_select"))
            )
        )
    return out


def choice_for(question: Question, answer: str | list[str]) -> Choice:
    labels = [o.label.strip().lower() for o in question.options]
    if isinstance(answer, list):
        if not question.multi_select:
            raise BadInput("this question takes one answer, not a list")
        picks = []
        if len(set(answer)) != len(answer) or not answer:
            raise BadInput("each option once")
        for item in answer:
            if item.strip().lower() not in labels:
                raise BadInput(f"{item!r} is not one of the options")
            picks.append(labels.index(item.strip().lower()))
        return Choice(picks=tuple(picks))
    if answer.strip().lower() in labels:
        return Choice(picks=(labels.index(answer.strip().lower()),))
    return Choice(text=answer.strip())
