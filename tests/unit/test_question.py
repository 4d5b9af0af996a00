"""Unit tests for kimi_mcp.question: reading AskUserQuestion arguments, validating a caller's answer."""

from __future__ import annotations

import json
import time

import pytest

from kimi_mcp.errors import BadInput
from kimi_mcp.message import WORD_JOINER
from kimi_mcp.question import MAX_FREE_TEXT, Choice, Option, Question, choice_for, questions_of
from kimi_mcp.scope import Inbox, Message, Scope, TokenMeter

ARGS = {
    "questions": [
        {
            "question": "Which colour?",
            "header": "Colour",
            "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cold"}],
            "multi_select": False,
        },
        {
            "question": "Which fruits?",
            "header": "Fruit",
            "options": [{"label": "Apple"}, {"label": "Pear"}, {"label": "Plum"}],
            "multi_select": True,
        },
    ]
}
COLOUR = Question("Which colour?", "Colour", (Option("Red", "warm"), Option("Blue", "cold")))
FRUIT = Question(
    "Which fruits?", "Fruit", (Option("Apple"), Option("Pear"), Option("Plum")), multi_select=True
)


def test_questions_of_json_text_and_dict() -> None:
    assert questions_of(json.dumps(ARGS)) == [COLOUR, FRUIT]
    assert questions_of(ARGS) == [COLOUR, FRUIT]


def test_questions_offer_free_text_by_default() -> None:
    # both dialects add an "Other" option with a one-line input to every question (measured)
    assert all(q.free_text for q in questions_of(ARGS))


def test_to_dict() -> None:
    assert COLOUR.to_dict() == {
        "question": "Which colour?",
        "header": "Colour",
        "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cold"}],
        "multi_select": False,
        "free_text": True,
    }


def test_questions_of_reads_kimi_codes_logged_spelling() -> None:
    # Kimi Code's session log (interaction.request) spells it multiSelect
    args = {
        "questions": [{"question": "Q?", "options": [{"label": "a"}, {"label": "b"}], "multiSelect": True}]
    }
    assert questions_of(args)[0].multi_select is True


@pytest.mark.parametrize(
    "arguments",
    ["", "not json", "[1, 2]", "null", '{"questions": "x"}', '{"questions": null}', "{}", 42, None, [ARGS]],
)
def test_questions_of_malformed_gives_nothing(arguments) -> None:
    assert questions_of(arguments) == []


def test_questions_of_keeps_what_it_can() -> None:
    args = {
        "questions": [
            "not an object",
            {"header": "no question text"},
            {"question": "   "},
            {
                "question": "  Kept?  ",
                "header": 7,
                "options": [{"label": "yes"}, {"description": "no label"}, "plain", 3, {"label": ""}],
                "multi_select": "yes",  # not a boolean: single-select
            },
            {"question": "No options", "options": "x"},
        ]
    }
    assert questions_of(args) == [
        Question("Kept?", "", (Option("yes"), Option("plain"))),
        Question("No options"),
    ]


def test_choice_single_label_case_insensitive_and_stripped() -> None:
    assert choice_for(COLOUR, "  blue ") == Choice(picks=(1,))
    assert choice_for(COLOUR, "Red") == Choice(picks=(0,))


def test_choice_multi_labels_sorted() -> None:
    assert choice_for(FRUIT, ["plum", "Apple"]) == Choice(picks=(0, 2))
    assert choice_for(FRUIT, "Pear") == Choice(picks=(1,))  # one label answers a multi-select question too


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ([], "empty"),
        (["Apple", "apple"], "twice"),
        (["Apple", "Kiwi"], "'Kiwi' is not one of the options"),
        (["Apple", 3], "3 is not one of the options"),
    ],
)
def test_choice_multi_errors(answer, problem) -> None:
    with pytest.raises(BadInput, match=problem) as caught:
        choice_for(FRUIT, answer)
    assert "'Apple', 'Pear', 'Plum'" in str(caught.value)
    assert caught.value.suggestion


def test_a_list_never_answers_a_single_select_question() -> None:
    with pytest.raises(BadInput, match="only a multi-select question") as caught:
        choice_for(COLOUR, ["Red"])
    assert "one option label" in caught.value.suggestion


def test_anything_else_is_free_text() -> None:
    assert choice_for(COLOUR, "teal, please") == Choice(text="teal, please")
    assert choice_for(FRUIT, "only kiwis") == Choice(text="only kiwis")


def test_free_text_is_one_printable_line() -> None:
    assert choice_for(COLOUR, "two\nlines\r\n\tand a tab") == Choice(text="two lines and a tab")
    assert choice_for(COLOUR, "esc \x1b[201~ inside") == Choice(text="esc \u241b[201~ inside")


def test_free_text_guards_kimi_cli_placeholders() -> None:
    # kimi-cli expands "[Pasted text #N]" in the Other input too
    assert choice_for(COLOUR, "see [Pasted text #1]") == Choice(text=f"see [{WORD_JOINER}Pasted text #1]")


@pytest.mark.parametrize("answer", ["", "   ", "\n\t"])
def test_empty_answer_is_an_error(answer) -> None:
    with pytest.raises(BadInput, match="empty"):
        choice_for(COLOUR, answer)


def test_free_text_is_bounded() -> None:
    assert choice_for(COLOUR, "x" * MAX_FREE_TEXT).text == "x" * MAX_FREE_TEXT
    with pytest.raises(BadInput, match="over the"):
        choice_for(COLOUR, "x" * (MAX_FREE_TEXT + 1))


def test_without_free_text_only_labels() -> None:
    closed = Question("Which colour?", options=(Option("Red"), Option("Blue")), free_text=False)
    with pytest.raises(BadInput, match="'teal' is not one of the options") as caught:
        choice_for(closed, "teal")
    assert "or free text" not in str(caught.value)
    assert caught.value.details["options"] == ["Red", "Blue"]


@pytest.mark.parametrize("answer", [3, None, {"label": "Red"}, ("Red",)])
def test_other_types_are_errors(answer) -> None:
    with pytest.raises(BadInput, match="label or a list of labels"):
        choice_for(COLOUR, answer)


# -- the inbox: an answer names its question; a queued message keeps its own limits -----------------------
def test_an_answer_for_a_question_that_is_gone_is_not_taken_and_is_said_in_notes() -> None:
    scope = Scope(deadline=time.monotonic() + 60)
    inbox = scope.inbox
    inbox.ask(Question("First?", options=(Option("a"), Option("b"))))
    first = inbox.asked.id
    assert inbox.deliver("answer", {"picks": [1], "text": None, "question": first}) is True
    inbox.ask(Question("Second?", options=(Option("approve"), Option("reject"))), "approval")
    assert inbox.asked.id != first
    assert inbox.take_answer() is None  # asking again drops an answer not yet taken
    late = {"picks": [0], "text": None, "question": first}  # through the store, after the first was answered
    assert scope.deliver("answer", late) is False
    assert inbox.asked is not None and inbox.take_answer() is None  # "approve" was never picked
    assert any("already answered or dismissed" in note for note in scope.notes)
    assert inbox.answer(Choice(picks=(1,)), inbox.asked.id) is True and inbox.take_answer() == Choice(
        picks=(1,)
    )
    inbox.ask(Question("Third?"), question_id="q-from-worker")  # a worker's question keeps its id
    assert inbox.asked.id == "q-from-worker" and inbox.asked.to_dict()["id"] == "q-from-worker"
    assert inbox.answer("declined") is True  # no id named: the question asked now


def test_a_message_keeps_its_approvals_and_max_tokens_through_the_store_and_the_broker() -> None:
    message = Message("next", "queue", at=5.0, approvals="ask", max_tokens=900)
    assert Message.from_payload(json.loads(json.dumps(message.to_payload()))) == message
    plain = Message("steer it", "steer", at=6.0)
    assert plain.to_payload() == {"text": "steer it", "mode": "steer", "at": 6.0}
    inbox = Inbox()
    inbox.deliver("message", message.to_payload())
    assert inbox.next_message(("queue",)) == message


def test_a_turn_cap_stops_the_turn_that_crosses_it_within_the_jobs_own_limit() -> None:
    meter = TokenMeter(max_tokens=10_000)
    owner = object()
    meter.record(owner, 1, 4000)  # the job's first turn
    meter.cap_turn(owner, 1500)  # the queued follow-up's own max_tokens
    meter.record(owner, 2, 1500)
    assert meter.over() is None
    meter.record(owner, 2, 1501)
    over = meter.over()
    assert over is not None and "queued turn used 1501 tokens" in over.message
    assert over.details == {"tokens": 1501, "max_tokens": 1500}
    meter.cap_turn(owner, None)  # the next turn without its own limit: only the job's holds
    assert meter.over() is None
    meter.record(owner, 3, 4500)
    assert meter.over() is not None and "max_tokens of 10000" in meter.over().message
