"""The message typed into Kimi: inert whatever the caller's text holds (see kimi_mcp.message)."""

from __future__ import annotations

import random

import pytest

from kimi_mcp.errors import BadInput
from kimi_mcp.message import (
    GUARD_LINE,
    TAB_MARK,
    TAB_NOTE,
    WORD_JOINER,
    MessageRules,
    check_size,
    estimated_tokens,
    neutralize,
    one_line,
    prepare,
)

LEGACY = MessageRules(keeps_tabs=True, max_tokens=45_000)
KIMI_CODE = MessageRules(keeps_tabs=False, max_tokens=45_000, skill_names=frozenset({"write-goal", "mine"}))


def test_controls_become_visible_and_nothing_can_end_a_paste() -> None:
    assert neutralize("a\x1b[201~\r!touch /tmp/x") == "a\u241b[201~\n!touch /tmp/x"
    assert neutralize("nul\x00 bel\x07 ctrl-x\x18 ctrl-c\x03 ctrl-d\x04") == (
        "nul\u2400 bel\u2407 ctrl-x\u2418 ctrl-c\u2403 ctrl-d\u2404"
    )
    assert neutralize("del\x7f csi\x9b nel\x85") == "del\u2421 csi<U+009B> nel<U+0085>"
    assert neutralize("crlf\r\nlf\ncr\rend") == "crlf\nlf\ncr\nend"
    kept = "tab\there emoji 👩‍💻 rtl \u202eabc\u202c cjk 漢字 nbsp\u00a0 ls\u2028"
    assert neutralize(kept) == kept


@pytest.mark.parametrize(
    "text",
    ["/exit", "  /clear", "\n/login now", "!touch /tmp/x", "\t!rm -rf /", "exit", " quit ", "/yolo x" * 200,
     "\x00!touch x", "\x1b!x", "@file", "#", "?", "&x", "[Pasted text #1]"],
)  # fmt: skip
def test_a_message_never_starts_with_a_command_or_mode_prefix(text: str) -> None:
    for rules in (LEGACY, KIMI_CODE):
        message = prepare(text, rules)
        assert message.startswith(GUARD_LINE + "\n")
        assert message.split("\n", 1)[1] == prepare("x" + text, rules)[1:]  # the whole text follows


@pytest.mark.parametrize("text", ["fix the bug", "exit the loop early", "Ünïcode first", "42 is the answer"])
def test_ordinary_messages_are_left_alone(text: str) -> None:
    assert prepare(text, LEGACY) == text
    assert prepare(text, KIMI_CODE) == text


def test_tabs_kimi_code_gets_a_visible_mark_and_a_note_legacy_keeps_them() -> None:
    rule = "all:\n\tcc -o app main.c\n"
    assert prepare(rule, LEGACY) == rule
    assert prepare(rule, KIMI_CODE) == f"all:\n{TAB_MARK}cc -o app main.c\n\n{TAB_NOTE}"


def test_skill_words_and_placeholders_cannot_expand() -> None:
    text = "use /write-goal and /mine, not /etc/passwd or a,/write-goal; /skill:mine\n/unknown"
    assert prepare(text, KIMI_CODE) == (
        f"use {WORD_JOINER}/write-goal and /mine, not /etc/passwd or a,/write-goal; {WORD_JOINER}/skill:mine"
        "\n/unknown"
    )  # "/mine," is not a whole word
    assert prepare(text, LEGACY) == text  # legacy expands no skill words mid-text
    placeholders = "see [Pasted text #1] and [image:abc,10x10] but [link] stays"
    expected = f"see [{WORD_JOINER}Pasted text #1] and [{WORD_JOINER}image:abc,10x10] but [link] stays"
    assert prepare(placeholders, LEGACY) == prepare(placeholders, KIMI_CODE) == expected


def test_one_line_feedback_is_inert_too() -> None:
    assert one_line("a path\n\x1b[201~\r!x\tz") == "a path \u241b[201~ !x z"


def test_random_text_always_comes_out_inert() -> None:
    alphabet = [chr(c) for c in range(0, 0xA0)] + ["漢", "👩", "\u202e", "/", "!", " ", "\t"]
    rng = random.Random(12)
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for rules in (LEGACY, KIMI_CODE):
            message = prepare(text, rules)
            assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in message)
            assert "\x1b" not in message and "\r" not in message
            if message.strip():
                assert message.lstrip()[0].isalnum()
            if not rules.keeps_tabs:
                assert "\t" not in message


def test_size_is_checked_in_kimis_own_token_estimate() -> None:
    assert estimated_tokens("abcd" * 10) == 10
    assert estimated_tokens("漢字") == 2
    check_size("a" * 4 * 45_000, LEGACY)
    with pytest.raises(BadInput) as info:
        check_size("a" * (4 * 45_000 + 1), LEGACY)
    assert "45,000 tokens" in info.value.message
    assert info.value.details["limit_tokens"] == 45_000
    with pytest.raises(BadInput):
        check_size("漢" * 45_001, KIMI_CODE)
