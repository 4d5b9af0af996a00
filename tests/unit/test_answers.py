"""Unit tests for kimi_mcp.answers: JSON extraction from Kimi's final text and lenient answer parsing."""

from __future__ import annotations

import json

import pytest

from kimi_mcp.answers import (
    MAX_SCAN_CHARS,
    AnalysisAnswer,
    ConsultAnswer,
    DebugAnswer,
    RefactorAnswer,
    VerifyAnswer,
    extract_json,
    parse_answer,
    preview,
)
from kimi_mcp.models import Finding, Suggestion

FENCE = "```"


def fenced(obj: object, lang: str = "json", fence: str = FENCE) -> str:
    return f"{fence}{lang}\n{json.dumps(obj, indent=2)}\n{fence}"


# --------------------------------------------------------------------------------------- extract_json


def test_fenced_json_block_with_prose_before_and_after() -> None:
    text = f"I looked at the code.\n\n{fenced({'a': 1, 'b': [1, 2]})}\n\nLet me know if you need more."
    assert extract_json(text) == {"a": 1, "b": [1, 2]}


def test_fence_without_language_and_tilde_fence() -> None:
    assert extract_json(f"Result:\n{fenced({'x': 'y'}, lang='')}\n") == {"x": "y"}
    assert extract_json(f"Result:\n{fenced({'x': 'z'}, fence='~~~')}\n") == {"x": "z"}
    assert extract_json(f"Result:\n{fenced({'x': 'w'}, lang='JSON')}\n") == {"x": "w"}


def test_closing_fence_on_the_last_json_line() -> None:
    assert extract_json('Here:\n```json\n{"a": 1,\n "b": 2}```\nDone.') == {"a": 1, "b": 2}


def test_last_valid_fenced_block_wins() -> None:
    text = "\n".join(
        [
            "First draft:",
            fenced({"draft": 1}),
            "Final:",
            fenced({"final": 2}),
            "And a broken one:",
            '```json\n{"broken": \n```',
            "A list, not an object:",
            fenced([1, 2, 3]),
        ]
    )
    assert extract_json(text) == {"final": 2}


def test_fenced_block_preferred_over_later_bare_object() -> None:
    text = f'{fenced({"answer": True})}\nFor example, a config like {{"debug": false}} also works.'
    assert extract_json(text) == {"answer": True}


def test_non_json_fenced_blocks_are_skipped_even_with_fences_inside() -> None:
    code = 'def f():\n    return {"not": "the answer"}\n'
    text = f"Changed:\n```python\n{code}```\nSummary:\n{fenced({'ok': 1})}"
    assert extract_json(text) == {"ok": 1}
    # a 4-backtick markdown block holding a ``` line: the inner fence does not close it
    text = f"````markdown\nexample:\n```\nnot json\n```\n````\n{fenced({'ok': 2}, lang='')}"
    assert extract_json(text) == {"ok": 2}


def test_fenced_block_with_prose_inside_is_scanned() -> None:
    text = '```json\nHere you go: {"a": 1} -- hope it helps\n```'
    assert extract_json(text) == {"a": 1}


def test_bare_object_with_prose_around() -> None:
    text = 'Summary first. {"diagnosis": "off by one", "n": 3} That is all, thanks!'
    assert extract_json(text) == {"diagnosis": "off by one", "n": 3}


def test_nested_objects_return_the_top_level_one() -> None:
    obj = {"outer": {"inner": {"deep": [1, {"x": 2}]}}, "after": "z"}
    assert extract_json("prefix " + json.dumps(obj) + " suffix") == obj


def test_braces_and_brackets_inside_strings() -> None:
    obj = {"code": "if (x) { return y; } ] [ {{", "closing": "}", "opening": "{"}
    assert extract_json("text " + json.dumps(obj) + " more text") == obj


def test_escaped_quotes_and_backslashes_inside_strings() -> None:
    obj = {"msg": 'he said "}" and left \\', "path": "C:\\dir\\}", "q": '\\"{'}
    raw = json.dumps(obj)
    assert '\\"' in raw and "\\\\" in raw
    assert extract_json(f"prose {raw} prose") == obj


def test_last_bare_object_wins() -> None:
    assert extract_json('{"first": 1} then {"second": 2} and finally {"third": 3}.') == {"third": 3}


def test_quotes_in_prose_before_the_object_do_not_confuse_the_scanner() -> None:
    text = 'He said "use {braces} carefully and "quote" odd " things. {"a": "b"}'
    assert extract_json(text) == {"a": "b"}


def test_truncated_json_returns_earlier_valid_object_never_a_fragment() -> None:
    truncated = '{"analysis": "x", "suggestions": [{"title": "a"}, {"title": "b", "detail": "cut'
    assert extract_json(truncated) is None
    assert extract_json('{"ok": 1}\nNow the answer: ' + truncated) == {"ok": 1}
    assert extract_json(f"{fenced({'early': 1})}\n```json\n{truncated}") == {"early": 1}


def test_broken_json_is_skipped() -> None:
    assert extract_json('{"a": undefined_name}') is None
    assert extract_json('{"a": [1, 2}') is None
    assert extract_json('{"a": [1, 2} and then {"b": 3}') == {"b": 3}
    assert extract_json('{"good": 1} {"bad": nope}') == {"good": 1}


def test_trailing_commas_are_repaired_outside_strings_only() -> None:
    text = '```json\n{"a": [1, 2,], "b": {"c": "keep ,} this",},}\n```'
    assert extract_json(text) == {"a": [1, 2], "b": {"c": "keep ,} this"}}
    assert extract_json('bare {"x": 1, "y": [true,],} end') == {"x": 1, "y": [True]}


def test_bom_typographic_quotes_and_python_literals() -> None:
    assert extract_json('\ufeff{"a": 1}') == {"a": 1}
    assert extract_json('```json\n\ufeff{"a": 2}\n```') == {"a": 2}
    smart = "{\u201cverdict\u201d: \u201cpass\u201d, \u201cnote\u201d: \u201cNone of it\u201d}"
    assert extract_json(smart) == {"verdict": "pass", "note": "None of it"}
    assert extract_json('{"a": True, "b": None, "c": "True stays"}') == {
        "a": True,
        "b": None,
        "c": "True stays",
    }


def test_no_json_at_all() -> None:
    assert extract_json("") is None
    assert extract_json("I fixed the bug; the tests pass now.") is None
    assert extract_json("A set {1, 2} and a dict {'a': 1} are not JSON objects") is None
    assert extract_json("unbalanced } braces { everywhere }") is None


def test_non_object_json_is_ignored() -> None:
    assert extract_json("```json\n[1, 2, 3]\n```") is None
    assert extract_json('```json\n"just a string"\n```') is None
    assert extract_json("```json\n42\n```") is None
    assert extract_json("```json\nnull\n```") is None


def test_array_of_objects_is_not_an_object() -> None:
    assert extract_json(fenced([{"a": 1}, {"b": 2}])) is None
    assert extract_json('Results: [{"a": 1}, {"b": 2}] as requested.') is None
    assert extract_json('[{"a": 1}] and then the answer {"c": 3}') == {"c": 3}
    # an array before a fenced answer does not hide it, and brackets in prose are harmless
    assert extract_json("See [1] and list[str] and [{x}].\n" + fenced({"ok": 1})) == {"ok": 1}
    assert extract_json('Not JSON: [{a}] but this is: {"ok": 2}') == {"ok": 2}


def test_never_raises_on_odd_input() -> None:
    odd = (
        None,
        42,
        "{" * 10_000,
        "[{" * 10_000,
        "[" * 10_000 + "]" * 10_000,
        '{"a": ' + "[" * 100_000,
        "\x00{}",
    )
    for text in odd:
        extract_json(text)  # type: ignore[arg-type]
    deep = '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"
    assert extract_json(deep) is None  # too deep for json: no crash, no result


def test_huge_input_still_finds_the_answer_at_the_end() -> None:
    prose = ('lorem ipsum { dolor } sit amet, "consectetur" [adipiscing] elit. ' * 200_000)[:9_000_000]
    text = prose + "\n" + fenced({"answer": 42})
    assert extract_json(text) == {"answer": 42}


def test_huge_truncated_object_gives_none() -> None:
    text = '{"items": [' + '{"k": "v", "n": [1, 2, {"z": "}"}]}, ' * 50_000  # ~1.9 MB, never closed
    assert len(text) < MAX_SCAN_CHARS
    assert extract_json(text) is None


def test_only_the_tail_is_scanned() -> None:
    text = '{"early": 1}' + " " * (MAX_SCAN_CHARS + 10)
    assert extract_json(text) is None
    assert extract_json('{"early": 1}' + " " * (MAX_SCAN_CHARS - 100)) == {"early": 1}


# ---------------------------------------------------------------------------------------- parse_answer


def test_refactor_answer() -> None:
    raw = {"explanation": "Extracted a helper.", "behavior_preserved": "yes", "risks": "callers of _old"}
    parsed, got = parse_answer("Done.\n" + fenced(raw), RefactorAnswer)
    assert got == raw
    assert parsed == RefactorAnswer(
        explanation="Extracted a helper.", behavior_preserved=True, risks=["callers of _old"]
    )
    parsed, _ = parse_answer(
        fenced({"explanation": "x", "behavior_preserved": "unsure", "extra": 1}), RefactorAnswer
    )
    assert parsed is not None and parsed.behavior_preserved is None and parsed.risks == []


def test_debug_answer_with_code_changes() -> None:
    raw = {
        "diagnosis": "KeyError on missing user",
        "root_cause": "src/app.py:12 indexes the dict directly",
        "solution": ["use .get()", "added a test"],
        "code_changes": [
            {"path": "src/app.py", "description": "use dict.get"},
            {"file": "tests/test_app.py", "summary": "regression test"},
            "README.md: documented the default",
            {"description": "no path: dropped"},
        ],
    }
    parsed, _ = parse_answer(fenced(raw), DebugAnswer)
    assert parsed is not None
    assert parsed.diagnosis == "KeyError on missing user"
    assert parsed.solution == "use .get()\nadded a test"
    assert [(c.path, c.description) for c in parsed.code_changes] == [
        ("src/app.py", "use dict.get"),
        ("tests/test_app.py", "regression test"),
        ("README.md", "documented the default"),
    ]


def test_analysis_answer_coercions() -> None:
    raw = {
        "analysis": "Mostly fine.",
        "suggestions": [
            {
                "title": "SQL injection",
                "detail": "use params",
                "file": "db.py",
                "line": "42",
                "severity": "HIGH",
            },
            {"title": "Odd severity", "severity": "urgent", "line": "n/a"},
            {"title": "Location", "file": "src/x.py:17"},
            {"title": "Float line", "line": 7.0, "severity": "moderate"},
            "A plain string suggestion",
            42,
        ],
    }
    parsed, _ = parse_answer(fenced(raw), AnalysisAnswer)
    assert parsed is not None
    assert all(isinstance(s, Suggestion) for s in parsed.suggestions)
    first, odd, location, floaty, plain = parsed.suggestions
    assert (first.file, first.line, first.severity) == ("db.py", 42, "high")
    assert (odd.severity, odd.line) == (None, None)
    assert (location.file, location.line) == ("src/x.py", 17)
    assert (floaty.line, floaty.severity) == (7, "medium")
    assert plain.title == "A plain string suggestion"


@pytest.mark.parametrize(
    ("given", "expected"),
    [("pass", "pass"), ("PASS", "pass"), ("Passed", "pass"), ("ok", "pass"), ("fail", "fail"),
     ("FAILED", "fail"), ("partial", "partial"), (" Partial ", "partial")],
)  # fmt: skip
def test_verify_verdicts(given: str, expected: str) -> None:
    parsed, _ = parse_answer(fenced({"verdict": given}), VerifyAnswer)
    assert parsed is not None and parsed.verdict == expected


@pytest.mark.parametrize("given", ["unknown", "maybe", "", None, 1, True, ["pass"]])
def test_verify_wrong_verdict_is_a_parse_failure(given: object) -> None:
    raw = {"verdict": given, "findings": []}
    parsed, got = parse_answer(fenced(raw), VerifyAnswer)
    assert parsed is None
    assert got == raw


def test_verify_findings_status_normalised() -> None:
    raw = {
        "verdict": "partial",
        "findings": [
            {"requirement": "r1", "status": "Met", "file": "a.py", "line": 3},
            {"requirement": "r2", "status": "NOT_MET", "evidence": "no handler"},
            {"requirement": "r3", "status": "partially met"},
            {"requirement": "r4", "status": "who knows"},
            {"requirement": "r5", "met": False},
        ],
        "unmet_requirements": ["r2", "", None, "r3"],
    }
    parsed, _ = parse_answer(fenced(raw), VerifyAnswer)
    assert parsed is not None
    assert all(isinstance(f, Finding) for f in parsed.findings)
    assert [f.status for f in parsed.findings] == ["met", "unmet", "partial", "unknown", "unmet"]
    assert parsed.findings[0].line == 3 and parsed.findings[1].detail == "no handler"
    assert parsed.unmet_requirements == ["r2", "r3"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [(0.8, 0.8), ("0.8", 0.8), (80, 0.8), ("80%", 0.8), ("80 %", 0.8), (1, 1.0), (0, 0.0), ("high", 0.85),
     ("Medium", 0.6), ("LOW", 0.3), ("very sure", None), (250, None), (-0.5, None), (None, None),
     (True, None), ("nan", None)],
)  # fmt: skip
def test_consult_confidence(given: object, expected: float | None) -> None:
    parsed, _ = parse_answer(fenced({"response": "r", "confidence": given}), ConsultAnswer)
    assert parsed is not None
    if expected is None:
        assert parsed.confidence is None
    else:
        assert parsed.confidence == pytest.approx(expected)


def test_consult_lists_from_single_strings_and_objects() -> None:
    raw = {
        "response": "Do not ship yet.",
        "key_risks": "data loss on rollback",
        "assumptions": [{"assumption": "single writer"}, "UTC clocks", ""],
        "alternatives": None,
        "evidence": ["src/db.py:10", 42],
    }
    parsed, _ = parse_answer("My view:\n" + fenced(raw), ConsultAnswer)
    assert parsed is not None
    assert parsed.key_risks == ["data loss on rollback"]
    assert parsed.assumptions == ["assumption: single writer", "UTC clocks"]
    assert parsed.alternatives == []
    assert parsed.evidence == ["src/db.py:10", "42"]


@pytest.mark.parametrize(
    ("model", "main"),
    [(RefactorAnswer, "explanation"), (DebugAnswer, "diagnosis"), (AnalysisAnswer, "analysis"),
     (VerifyAnswer, "verdict"), (ConsultAnswer, "response")],
)  # fmt: skip
def test_missing_or_empty_main_field_is_a_failure(model: type, main: str) -> None:
    raw = {"risks": [], "solution": "x", "suggestions": [], "findings": [], "key_risks": ["k"]}
    parsed, got = parse_answer(fenced(raw), model)
    assert parsed is None and got == raw
    for empty in (None, "", "   "):
        parsed, _ = parse_answer(fenced({**raw, main: empty}), model)
        assert parsed is None


def test_parse_failure_without_json() -> None:
    assert parse_answer("I could not finish the task.", DebugAnswer) == (None, None)
    assert parse_answer("", ConsultAnswer) == (None, None)


def test_parse_answer_skips_a_trailing_example_object() -> None:
    bare = 'Answer: {"response": "Use B."} and for reference the file had {"retries": 3}'
    assert extract_json(bare) == {"retries": 3}  # the last object...
    parsed, got = parse_answer(bare, ConsultAnswer)  # ...but the one that fits the model is the answer
    assert parsed is not None and parsed.response == "Use B." and got == {"response": "Use B."}


def test_unfilled_placeholder_is_not_an_answer() -> None:
    parsed, got = parse_answer(fenced({"response": "<string, required> your answer"}), ConsultAnswer)
    assert parsed is None and got == {"response": "<string, required> your answer"}
    parsed, _ = parse_answer(fenced({"response": "<b>bold</b> claims are fine"}), ConsultAnswer)
    assert parsed is not None


def test_parse_answer_unwraps_a_single_key_wrapper() -> None:
    parsed, got = parse_answer(fenced({"answer": {"analysis": "ok", "suggestions": []}}), AnalysisAnswer)
    assert parsed is not None and parsed.analysis == "ok"
    assert got == {"analysis": "ok", "suggestions": []}


def test_wrong_types_are_coerced_not_fatal() -> None:
    raw = {"diagnosis": 404, "root_cause": {"file": "a.py", "why": "stale cache"}, "code_changes": "a.py"}
    parsed, _ = parse_answer(fenced(raw), DebugAnswer)
    assert parsed is not None
    assert parsed.diagnosis == "404"
    assert parsed.root_cause == "file: a.py\nwhy: stale cache"
    assert [c.path for c in parsed.code_changes] == ["a.py"]
    parsed, _ = parse_answer(fenced({"analysis": "a", "suggestions": {"title": "single"}}), AnalysisAnswer)
    assert parsed is not None and [s.title for s in parsed.suggestions] == ["single"]


def test_parse_answer_never_raises() -> None:
    for text in (None, 42, "{" * 1000, '{"verdict": ' + "[" * 100_000):
        assert parse_answer(text, VerifyAnswer)[0] is None  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- preview


def test_preview() -> None:
    assert preview("") == ""
    assert preview("short") == "short"
    assert preview("x" * 2000) == "x" * 2000
    cut = preview("a" * 2000 + "b" * 500)
    assert cut == "a" * 2000 + "… [500 more chars]"
    assert preview("abcdef", limit=2) == "ab… [4 more chars]"
