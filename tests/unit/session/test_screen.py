"""Unit tests for kimi_mcp.session._screen: ANSI stripping and the virtual terminal used to read Kimi's TUI."""

from __future__ import annotations

import pytest

from kimi_mcp.session._screen import TerminalScreen, strip_ansi

# -------------------------------------------------------------------------------------------- strip_ansi


def test_strip_ansi_removes_csi_sequences() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m plain \x1b[2K\x1b[10;5Hmoved\x1b[?25l") == "red plain moved"


def test_strip_ansi_removes_osc_with_bel_terminator() -> None:
    assert strip_ansi("before\x1b]0;window title\x07after") == "beforeafter"


def test_strip_ansi_removes_osc_with_st_terminator() -> None:
    text = "a\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\b"
    assert strip_ansi(text) == "alinkb"


def test_strip_ansi_removes_dcs_and_two_byte_escapes() -> None:
    assert strip_ansi("x\x1bPq#0;1;2\x1b\\y\x1bMz\x1b_apc\x1b\\") == "xyz"


def test_strip_ansi_keeps_text_newlines_tabs_and_unicode() -> None:
    text = "line 1\n\tindented ✨ 你好 ⠋ 🌑\nline 3"
    assert strip_ansi(text) == text


def test_strip_ansi_removes_carriage_return_and_other_controls() -> None:
    assert strip_ansi("abc\r\ndef\x08\x00\x7f") == "abc\ndef"


def test_strip_ansi_removes_fp_fs_and_nf_escapes() -> None:
    assert strip_ansi("\x1b7saved\x1b8 \x1b(Bplain\x1b=\x1b>\x1bc") == "saved plain"


# ---------------------------------------------------------------------------------------- TerminalScreen


def test_plain_text_rendered_into_lines() -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed("hello\r\nworld")
    assert screen.lines == ["hello", "world", "", "", ""]
    assert screen.text == "hello\nworld\n\n\n"


def test_the_text_is_drawn_again_only_after_a_feed() -> None:
    """A running job's screen is read every quarter second (``jobs.SCREEN_TICK``): an unchanged screen is
    not drawn again (the same text object), a fed one is, also after a feed that only moved the cursor."""
    screen = TerminalScreen(rows=3, cols=20)
    assert screen.text == "\n\n"
    screen.feed("hello")
    first = screen.text
    assert first == "hello\n\n" and screen.text is first
    screen.feed("\x1b[1;1H")  # the cursor home: drawn again, the same text
    assert screen.text == first and screen.text is not first
    screen.feed("J")
    assert screen.text == "Jello\n\n"


def test_dimensions() -> None:
    screen = TerminalScreen(rows=7, cols=33)
    assert len(screen.lines) == 7
    screen.feed("x" * 40)
    assert screen.lines[0] == "x" * 33
    assert screen.lines[1] == "x" * 7


def test_text_drawn_with_cursor_movement_lands_in_the_right_lines() -> None:
    screen = TerminalScreen(rows=10, cols=40)
    screen.feed("\x1b[2J\x1b[3;5Hhello")  # row 3, column 5
    screen.feed("\x1b[1;1Htop")
    screen.feed("\x1b[5;10Hx\x1b[D\x1b[Dyz")  # back two columns and overwrite
    lines = screen.lines
    assert lines[0] == "top"
    assert lines[1] == ""
    assert lines[2] == "    hello"
    assert lines[4] == "        yz"


def test_repaint_in_place_replaces_a_line() -> None:
    screen = TerminalScreen(rows=4, cols=30)
    screen.feed("\x1b[2;1H⠋ Composing...")
    screen.feed("\x1b[2;1H\x1b[2Kdone")
    assert screen.lines[1] == "done"
    # the tail keeps both, ANSI-stripped
    assert "⠋ Composing..." in screen.tail
    assert screen.tail.endswith("done")


def test_text_split_across_feeds_is_reassembled() -> None:
    screen = TerminalScreen(rows=3, cols=30)
    screen.feed("\x1b[2;")
    screen.feed("3Hsplit")
    assert screen.lines[1] == "  split"


def test_cursor_position_request_is_answered() -> None:
    screen = TerminalScreen(rows=10, cols=40)
    screen.feed("\x1b[4;7H")
    screen.feed("\x1b[6n")
    assert screen.take_replies() == ["\x1b[4;7R"]
    assert screen.take_replies() == []  # replies are handed out once


def test_replies_accumulate_until_taken() -> None:
    screen = TerminalScreen(rows=10, cols=40)
    screen.feed("\x1b[1;1H\x1b[6n\x1b[2;3H\x1b[6n")
    assert screen.take_replies() == ["\x1b[1;1R", "\x1b[2;3R"]


def test_private_device_status_query_is_survived_silently() -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed("\x1b[?996nafter")
    assert screen.take_replies() == []
    assert screen.lines[0] == "after"


@pytest.mark.parametrize("query", ["\x1b[c", "\x1b[>c", "\x1b[>0c", "\x1b[0c"])
def test_device_attribute_queries_do_not_break_rendering(query: str) -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed(query + "ok")
    assert screen.lines[0] == "ok"
    replies = screen.take_replies()
    assert all(reply.startswith("\x1b[") for reply in replies)


def test_primary_device_attributes_answered() -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed("\x1b[c")
    replies = screen.take_replies()
    assert len(replies) == 1
    assert replies[0].startswith("\x1b[?") and replies[0].endswith("c")


@pytest.mark.parametrize(
    "garbage",
    [
        "\x1b[999;999;999;999;m",
        "\x1b[38;5;999m\x1b[38;2;1;2m",
        "\x00\x01\xff\ufffd",
        "\x1bPqgarbage\x1b\\",
        "\x1b[?1A\x1b[?1H\x1b[?5r",  # private markers on sequences pyte cannot take them for
        "\x1b[99999999999999999999L\x1b[99999999999999999999@",
        "\x1b#8\x1b[?1049h\x1b[?1049l",
        "\x1b[<u\x1b[>1u\x1b[=5u",
    ],
)
def test_garbage_does_not_raise_and_later_output_renders(garbage: str) -> None:
    screen = TerminalScreen(rows=10, cols=40)
    screen.feed(garbage)
    screen.feed("\x1b[2J\x1b[8;1Hafter")
    assert screen.lines[7] == "after"


@pytest.mark.parametrize("incomplete", ["\x1b", "\x1b[", "\x1b[1;", "\x1b]0;unterminated", "\x1b[?????"])
def test_incomplete_sequences_do_not_raise(incomplete: str) -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed(incomplete)
    assert len(screen.lines) == 5


def test_text_after_unsupported_private_sequence_in_same_chunk_is_rendered() -> None:
    screen = TerminalScreen(rows=5, cols=20)
    screen.feed("\x1b[?1Ahello")
    assert screen.lines[0] == "hello"


def test_tail_is_stripped_and_counts_stripped_chars() -> None:
    screen = TerminalScreen(rows=5, cols=40)
    raw = "\x1b[32mgreen\x1b[0m text"
    screen.feed(raw)
    assert screen.tail == "green text"
    assert screen.total_chars == len("green text")  # marks count stripped characters


def test_tail_is_bounded_and_keeps_newest() -> None:
    screen = TerminalScreen(rows=5, cols=40)
    screen.TAIL_CHARS = 50
    for i in range(20):
        screen.feed(f"chunk-{i:02d}\n")
    assert len(screen.tail) == 50
    assert screen.tail.endswith("chunk-19\n")
    assert "chunk-00" not in screen.tail
    assert screen.total_chars == 20 * 9


def test_default_tail_bound() -> None:
    assert TerminalScreen.TAIL_CHARS == 200_000
    screen = TerminalScreen(rows=2, cols=10)
    screen.feed("a" * 1000)
    assert screen.tail == "a" * 1000  # under the bound nothing is lost


def test_tail_since_returns_only_new_plain_output() -> None:
    screen = TerminalScreen(rows=5, cols=40)
    screen.feed("old output\n")
    mark = screen.total_chars
    screen.feed("new output")
    assert screen.tail_since(mark) == "new output"


def test_tail_since_now_is_empty() -> None:
    screen = TerminalScreen(rows=5, cols=40)
    screen.feed("something")
    assert screen.tail_since(screen.total_chars) == ""
    assert screen.tail_since(screen.total_chars + 10) == ""


def test_tail_since_zero_is_whole_tail() -> None:
    screen = TerminalScreen(rows=5, cols=40)
    screen.feed("\x1b[1mbold\x1b[0m and more")
    assert screen.tail_since(0) == "bold and more"


def test_tail_since_with_ansi_contains_new_text() -> None:
    # approximate by design: never less than the new text
    screen = TerminalScreen(rows=5, cols=40)
    screen.feed("x" * 100)
    mark = screen.total_chars
    screen.feed("\x1b[31mError: boom\x1b[0m")
    since = screen.tail_since(mark)
    assert since.endswith("Error: boom")
    assert len(since) <= len("\x1b[31mError: boom\x1b[0m")


def test_an_error_shows_a_few_trimmed_lines_of_the_screen_not_its_art() -> None:
    from kimi_mcp.session._screen import EXCERPT_LINES, EXCERPT_WIDTH, excerpt

    screen = "\n".join(
        ["╭──────────────── Welcome ────────────────╮", "│  Session: 1234                         │"]
        + [f"│ line {i} of the turn {'x' * 300} │" for i in range(40)]
        + ["╰─────────────────────────────────────────╯", "⠋ thinking…", "   ", "── input ──────────", "> "]
    )
    text = excerpt(screen)
    lines = text.splitlines()
    assert len(lines) == EXCERPT_LINES and all(len(line) <= EXCERPT_WIDTH for line in lines)
    assert lines[0].startswith("line 37 of the turn") and lines[-2:] == [
        "thinking…",
        "input",
    ]  # ">" says nothing
    assert not any(ch in text for ch in "╭╮╰╯│─⠋")
    assert excerpt("") == "" and excerpt("│  │\n──") == ""
