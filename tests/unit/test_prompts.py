"""Unit tests for kimi_mcp.prompts: every template carries its inputs, the right task wording, and a JSON
instruction derived from (and parseable back into) its answer model."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel

from kimi_mcp.answers import (
    AnalysisAnswer,
    ConsultAnswer,
    DebugAnswer,
    RefactorAnswer,
    VerifyAnswer,
    extract_json,
    parse_answer,
)
from kimi_mcp.prompts import (
    analyze_prompt,
    answer_schema_text,
    code_task_prompt,
    consult_prompt,
    debug_prompt,
    free_prompt,
    refactor_prompt,
    verify_prompt,
)
from kimi_mcp.workspace import ContextFile

READ_ONLY = "read-only task: do not create, modify or delete files"
FILES = [
    ContextFile("src/app.py", "def handler(event):\n    return event['user']\n"),
    ContextFile("src/util/io.py", "SENTINEL_9431 = object()\n"),
]
ANSWER_MODELS = [RefactorAnswer, DebugAnswer, AnalysisAnswer, VerifyAnswer, ConsultAnswer]


def file_block(item: ContextFile) -> str:
    return f'<file path="{item.path}">\n{item.text}\n</file>'


def schema_block(text: str) -> str:
    """The fenced ```json example at the end of a prompt."""
    match = re.search(r"```json\n(.*)\n```", text, re.S)
    assert match, "no ```json example in the prompt"
    return match.group(1)


def assert_json_instruction(text: str, model: type[BaseModel]) -> None:
    assert "ONE fenced ```json block" in text
    example = json.loads(schema_block(text))
    assert list(example) == list(model.model_fields)
    for name in model.model_fields:
        assert f'"{name}":' in text
    # the instruction is the last thing in the prompt (after the files)
    assert text.rindex("ONE fenced ```json block") > text.rfind("</file>")


def all_prompts() -> dict[str, tuple[str, type[BaseModel] | None, bool]]:
    """name -> (prompt text, answer model, read-only?)"""
    return {
        "prompt": (free_prompt("Add a CLI flag --verbose", "src/app.py\nsrc/util/io.py"), None, False),
        "refactor": (
            refactor_prompt("src/app.py", FILES[0].text, "Rename handler to handle_event", True),
            RefactorAnswer,
            False,
        ),
        "debug": (
            debug_prompt("KeyError: 'user'", FILES, "started after the 2.0 upgrade"),
            DebugAnswer,
            False,
        ),
        "analyze": (analyze_prompt(FILES, "error handling", "security"), AnalysisAnswer, True),
        "verify": (verify_prompt("- returns 404 for unknown users", FILES, "be strict"), VerifyAnswer, True),
        "consult": (
            consult_prompt(
                "skeptic", "Should we cache sessions in Redis?", {"proposal": "Redis cache"}, None
            ),
            ConsultAnswer,
            True,
        ),
    }


# ---------------------------------------------------------------------------------------- shared rules


@pytest.mark.parametrize("name", list(all_prompts()))
def test_read_only_wording_only_in_read_only_prompts(name: str) -> None:
    text, _model, read_only = all_prompts()[name]
    if read_only:
        assert READ_ONLY in text
        assert "do not run shell commands that change anything; only read and search" in text
    else:
        assert "read-only" not in text.lower()
        assert "do not create, modify or delete files" not in text


@pytest.mark.parametrize("name", [n for n, (_t, model, _r) in all_prompts().items() if model])
def test_structured_prompts_end_with_the_json_instruction(name: str) -> None:
    text, model, _read_only = all_prompts()[name]
    assert model is not None
    assert_json_instruction(text, model)
    assert schema_block(text) == answer_schema_text(model)


def test_code_task_prompt_unchanged() -> None:
    text = code_task_prompt("  Write hello.py  ", FILES, "no dependencies")
    assert text.startswith("Write hello.py\n\nConstraints:\nno dependencies\n")
    assert "Work inside the current directory (the workspace) only." in text
    assert text.endswith(
        "\nContext files (current contents, paths relative to the workspace):\n"
        + "\n".join(file_block(f) for f in FILES)
    )
    assert code_task_prompt("t", []) == (
        "t\n\nWork inside the current directory (the workspace) only. When you are done, answer with a short "
        "summary of what you did."
    )


# ------------------------------------------------------------------------------------------- per tool


def test_free_prompt() -> None:
    assert free_prompt("  Explain main.py  ", None) == "Explain main.py"
    assert free_prompt("Explain main.py", "   ") == "Explain main.py"
    text = free_prompt("Explain main.py", "main.py\nlib/helpers.py")
    assert text.startswith("Explain main.py\n")
    assert "main.py\nlib/helpers.py" in text
    assert "```json" not in text


@pytest.mark.parametrize("safety", [True, False])
def test_refactor_prompt(safety: bool) -> None:
    text = refactor_prompt("src/app.py", FILES[0].text, "Rename handler to handle_event", safety)
    assert "Rename handler to handle_event" in text
    assert file_block(FILES[0]) in text
    assert "Edit ONLY src/app.py" in text
    assert ("public API" in text) is safety
    assert ("Keep the existing tests passing" in text) is safety
    assert "risks" in text


def test_debug_prompt() -> None:
    text = debug_prompt("Traceback ...\nKeyError: 'user'", FILES, "started after the 2.0 upgrade")
    assert "Traceback ...\nKeyError: 'user'" in text
    assert "started after the 2.0 upgrade" in text
    assert "root cause" in text and "FIX" in text
    for item in FILES:
        assert file_block(item) in text
    bare = debug_prompt("boom", [], None)
    assert "<file" not in bare and "Background" not in bare
    assert_json_instruction(bare, DebugAnswer)


def test_debug_prompt_error_with_backticks_stays_fenced() -> None:
    error = "AssertionError:\n```\nexpected\n```"
    text = debug_prompt(error, [], None)
    assert f"````\n{error}\n````" in text


@pytest.mark.parametrize(
    ("role", "word"),
    [
        ("general", "general code review"),
        ("security", "injection"),
        ("performance", "algorithmic complexity"),
        ("maintainability", "coupling"),
        ("testing", "missing edge cases"),
        ("architecture", "module boundaries"),
        ("Security", "injection"),
        ("astrology", "general code review"),
    ],
)
def test_analyze_prompt_roles(role: str, word: str) -> None:
    text = analyze_prompt(FILES, None, role)
    assert word in text
    for item in FILES:
        assert file_block(item) in text
    others = {"injection", "algorithmic complexity", "coupling", "missing edge cases", "module boundaries"}
    assert not any(other in text for other in others - {word})


def test_analyze_prompt_focus() -> None:
    assert "error handling in the retry loop" in analyze_prompt(
        FILES, "error handling in the retry loop", "general"
    )
    assert "Focus" not in analyze_prompt(FILES, None, "general")


def test_verify_prompt() -> None:
    text = verify_prompt(
        "- returns 404 for unknown users\n- logs every request", FILES, "be strict about logs"
    )
    assert "- returns 404 for unknown users\n- logs every request" in text
    assert "be strict about logs" in text
    assert "file:line" in text
    for item in FILES:
        assert file_block(item) in text
    assert "Additional instructions" not in verify_prompt("r", FILES, None)


# --------------------------------------------------------------------------------------------- consult


def test_consult_skeptic_renders_only_given_keys() -> None:
    context: dict[str, object] = {"proposal": "Move sessions to Redis", "known_risks": "Redis outage"}
    text = consult_prompt("skeptic", "Is this safe?", context, None)
    assert "find the flaws, risks" in text and "challenge its assumptions" in text
    assert "\nProposal:\nMove sessions to Redis\n" in text
    assert "\nKnown risks:\nRedis outage\n" in text
    assert "\nGoals:" not in text and "\nConstraints:" not in text
    assert "\nMessage:\nIs this safe?\n" in text
    assert text.index("Proposal:") < text.index("Known risks:") < text.index("Message:")
    assert "follow-up" not in text.lower()


def test_consult_skips_empty_values() -> None:
    text = consult_prompt("architect", "Design?", {"requirements": "", "alternatives": None}, None)
    assert "\nRequirements:" not in text and "\nAlternatives under consideration:" not in text


def test_consult_architect_and_debugger() -> None:
    text = consult_prompt(
        "architect", "Monolith or services?", {"requirements": "10k rps", "alternatives": "A"}, None
    )
    assert "trade-offs" in text
    assert "\nRequirements:\n10k rps\n" in text and "\nAlternatives under consideration:\nA\n" in text
    context = {
        "symptoms": "500s at night",
        "repro": "run nightly job",
        "logs": "OOMKilled",
        "tried": "more RAM",
    }
    text = consult_prompt("debugger", "Why?", context, None)
    assert "ranked by likelihood" in text and "confirm or rule it out" in text
    for label, value in (
        ("Symptoms", "500s"),
        ("How to reproduce", "nightly"),
        ("Logs", "OOM"),
        ("Already tried", "RAM"),
    ):
        assert re.search(rf"\n{label}:\n[^\n]*{value}", text)


def test_consult_judge_options_and_criteria() -> None:
    context: dict[str, object] = {
        "options": [
            {"name": "Postgres", "pros": ["mature", "SQL"], "cons": ["ops burden"]},
            {"name": "DynamoDB", "pros": "managed", "cons": []},
        ],
        "criteria": "cost, latency",
    }
    text = consult_prompt("judge", "Pick a database", context, None)
    assert "which option you choose and why" in text
    assert "Option 1: Postgres\nPros:\n- mature\n- SQL\nCons:\n- ops burden" in text
    assert "Option 2: DynamoDB\nPros:\nmanaged" in text
    assert "Option 2: DynamoDB\nPros:\nmanaged\nCons:" not in text
    assert "\nCriteria:\ncost, latency\n" in text


def test_consult_files_and_prior_exchange() -> None:
    files = "\n".join(file_block(f) for f in FILES)
    history = [
        {"role": "user", "content": "First question about caching"},
        {"role": "kimi", "content": "First answer: beware of stampedes"},
    ]
    text = consult_prompt("skeptic", "What about TTLs?", {"proposal": "cache", "files": files}, history)
    assert files in text
    assert "follow-up round" in text
    assert '<turn role="user">\nFirst question about caching\n</turn>' in text
    assert '<turn role="kimi">\nFirst answer: beware of stampedes\n</turn>' in text
    assert text.index("First question") < text.index("First answer") < text.index("What about TTLs?")
    assert "\nMessage:" not in text
    assert_json_instruction(text, ConsultAnswer)


def test_consult_role_is_case_insensitive() -> None:
    assert "impartial judge" in consult_prompt(" Judge ", "x", {}, None)


@pytest.mark.parametrize("role", ["oracle", "", "general"])
def test_consult_unknown_role(role: str) -> None:
    with pytest.raises(ValueError, match="skeptic, architect, debugger, judge"):
        consult_prompt(role, "hello", {}, None)


def test_consult_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        consult_prompt("skeptic", "   ", {}, None)
    with pytest.raises(ValueError, match="prior_exchange\\[0\\]"):
        consult_prompt("skeptic", "hi", {}, [{"role": "assistant", "content": "x"}])


# ------------------------------------------------------------------------------------- answer schemas


@pytest.mark.parametrize("model", ANSWER_MODELS, ids=lambda m: m.__name__)
def test_schema_text_lists_every_field_with_its_type(model: type[BaseModel]) -> None:
    example = json.loads(answer_schema_text(model))
    assert set(example) == set(model.model_fields)
    main = [name for name, info in model.model_fields.items() if info.is_required()]
    assert main == [model.main_field]  # type: ignore[attr-defined]
    assert ", required>" in example[model.main_field]  # type: ignore[attr-defined]


def test_schema_text_details() -> None:
    verify = json.loads(answer_schema_text(VerifyAnswer))
    assert verify["verdict"].startswith("<pass | fail | partial, required>")
    assert verify["findings"][0]["status"].startswith("<met | unmet | partial | unknown>")
    assert verify["findings"][0]["line"].startswith("<integer | null>")
    analysis = json.loads(answer_schema_text(AnalysisAnswer))
    assert analysis["suggestions"][0]["severity"] == "<info | low | medium | high | critical | null>"
    assert set(analysis["suggestions"][0]) == {"title", "detail", "file", "line", "severity"}
    consult = json.loads(answer_schema_text(ConsultAnswer))
    assert consult["confidence"].startswith("<number | null>")
    assert consult["key_risks"][0].startswith("<string>")
    debug = json.loads(answer_schema_text(DebugAnswer))
    assert set(debug["code_changes"][0]) == {"path", "description"}
    refactor = json.loads(answer_schema_text(RefactorAnswer))
    assert refactor["behavior_preserved"].startswith("<true | false | null>")


FILL_TEXT = {
    "explanation": "Extracted parse_args() from main(); no behaviour change.",
    "diagnosis": "handler() raises KeyError when the event has no user.",
    "root_cause": "src/app.py:2 indexes event['user'] directly.",
    "solution": "Return 400 when user is missing; added a regression test.",
    "analysis": "The handler trusts its input; two issues stand out.",
    "response": "The proposal works but the cache invalidation plan is missing.",
}


def fill(value: Any, key: str = "") -> Any:
    """Replace the example's placeholders with realistic values of the stated type."""
    if isinstance(value, dict):
        return {k: fill(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(value[0], key), fill(value[0], key)]
    assert isinstance(value, str) and value.startswith("<"), value
    kind = value[1 : value.index(">")].removesuffix(", required")
    if kind.startswith("string"):
        if key in ("file", "path"):
            return "src/app.py"
        return FILL_TEXT.get(key, f"{key}: see src/app.py:2")
    if kind.startswith("integer"):
        return 2
    if kind.startswith("number"):
        return 0.75
    if kind.startswith("true | false"):
        return True
    return kind.split(" | ")[0]  # a Literal: its first choice


@pytest.mark.parametrize("model", ANSWER_MODELS, ids=lambda m: m.__name__)
def test_round_trip_schema_to_parsed_answer(model: type[BaseModel]) -> None:
    filled = fill(json.loads(answer_schema_text(model)))
    text = f"I read the files and checked the behaviour.\n\n```json\n{json.dumps(filled, indent=2)}\n```\n"
    parsed, raw = parse_answer(text, model)
    assert raw == filled
    assert parsed is not None, f"{model.__name__} did not parse its own example"
    dumped = parsed.model_dump()
    main = model.main_field  # type: ignore[attr-defined]
    assert dumped[main] == filled[main]
    for name, value in filled.items():
        if isinstance(value, list) and value and isinstance(value[0], str):
            assert dumped[name] == value
        if isinstance(value, list) and value and isinstance(value[0], dict):
            assert len(dumped[name]) == 2
            for key, item in value[0].items():
                assert dumped[name][0][key] == item


@pytest.mark.parametrize("model", ANSWER_MODELS, ids=lambda m: m.__name__)
def test_unfilled_example_is_not_accepted(model: type[BaseModel]) -> None:
    text = f"```json\n{answer_schema_text(model)}\n```"
    assert extract_json(text) == json.loads(answer_schema_text(model))
    assert parse_answer(text, model)[0] is None
