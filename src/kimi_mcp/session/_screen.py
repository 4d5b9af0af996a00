"""A virtual terminal for reading Kimi's TUI: pyte for the live screen, plus a stripped text tail.

Kimi repaints its live area in place, so regexes over raw bytes miss text drawn in pieces; pyte gives
the screen as a person sees it. Finished output is also kept as ANSI-stripped text (``tail``) for
messages that scroll off the screen.
"""

from __future__ import annotations

import re
from typing import Any

import pyte

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS/SOS/PM/APC
    r"|\x1b[ -/]+[0-~]"  # nF escapes such as ESC ( B
    r"|\x1b[0-~]"  # Fp/Fe/Fs escapes such as ESC 7, ESC =, ESC c
    r"|[\x00-\x06\x08\x0b-\x1f\x7f]"
)
_PIECES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[^\[\]]|[^\x1b]+|\x1b")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


_ART = re.compile(
    r"[\u2500-\u259f\u2800-\u28ff\u25a0-\u25ff\u2190-\u21ff]+"
)  # boxes, blocks, spinners, arrows
EXCERPT_LINES = 5
EXCERPT_WIDTH = 160


def excerpt(text: str, lines: int = EXCERPT_LINES) -> str:
    """The last ``lines`` lines of a screen that say something, without box drawing, spinners or padding,
    each cut to ``EXCERPT_WIDTH`` characters: enough for an error to show what Kimi showed (the whole
    screen goes to the debug log and the transcript)."""
    kept: list[str] = []
    for line in reversed(text.splitlines()):
        words = " ".join(_ART.sub(" ", line).split())
        if len(words) > 1:
            kept.append(words[:EXCERPT_WIDTH])
            if len(kept) == lines:
                break
    return "\n".join(reversed(kept))


class _Screen(pyte.Screen):
    """pyte screen that tolerates private-mode queries and collects terminal replies."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines)
        self.replies: list[str] = []

    def write_process_input(self, data: str) -> None:
        self.replies.append(data)

    def report_device_status(self, mode: int, **kwargs: Any) -> None:  # pyte 0.8.2 lacks `private`
        if kwargs.get("private"):
            return
        super().report_device_status(mode)

    def report_device_attributes(self, mode: int = 0, **kwargs: Any) -> None:
        if kwargs.get("private"):
            return
        super().report_device_attributes(mode)

    def select_graphic_rendition(self, *attrs: int, **kwargs: Any) -> None:
        super().select_graphic_rendition(*attrs)


class TerminalScreen:
    """Feed it the child's output; read ``lines`` / ``text``; collect replies to terminal queries."""

    TAIL_CHARS = 200_000

    def __init__(self, rows: int = 40, cols: int = 120) -> None:
        self.rows = rows
        self.cols = cols
        self._screen = _Screen(cols, rows)
        self._stream = pyte.Stream(self._screen)
        self.tail = ""  # ANSI-stripped output, newest last, bounded
        self.total_chars = 0  # stripped characters seen so far (marks for tail_since)
        self.fed = (
            0  # feeds so far: ``text`` is drawn again only after one (a job's ticker reads it 4 times/s)
        )
        self._text: tuple[int, str] = (0, "")

    def feed(self, data: str) -> None:
        try:
            self._stream.feed(data)
        except Exception:  # a sequence pyte cannot handle: feed piece by piece, skipping the bad ones
            self._stream = pyte.Stream(self._screen)
            self._feed_pieces(data)
        stripped = strip_ansi(data)
        self.total_chars += len(stripped)
        self.tail = (self.tail + stripped)[-self.TAIL_CHARS :]
        self.fed += 1  # after the screen changed: a ``text`` drawn meanwhile is drawn again at the next read

    def _feed_pieces(self, data: str) -> None:
        # The failing sequence may sit anywhere in the chunk; re-feeding pieces already drawn is harmless
        # for text (it is redrawn in place only if the cursor moved) but we cannot know how far pyte got,
        # so the chunk is replayed from a clean parser state, skipping each sequence that raises.
        for piece in _PIECES.findall(data):
            try:
                self._stream.feed(piece)
            except Exception:
                self._stream = pyte.Stream(self._screen)

    def take_replies(self) -> list[str]:
        replies, self._screen.replies = self._screen.replies, []
        return replies

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self._screen.display]

    @property
    def text(self) -> str:
        """The screen's lines as one text (drawn again only when something was fed since)."""
        fed, drawn = self._text
        if fed != self.fed or not self.fed:
            fed = self.fed  # read before drawing: a feed while drawing makes the next read draw again
            drawn = "\n".join(self.lines)
            self._text = (fed, drawn)
        return drawn

    def tail_since(self, mark: int) -> str:
        """Stripped output produced after ``total_chars`` (a count of stripped characters) was ``mark``."""
        produced = self.total_chars - mark
        return self.tail[-produced:] if produced > 0 else ""
