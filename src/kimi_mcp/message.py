"""What kimi-mcp types into Kimi's input box: exactly one user message holding the caller's whole text.

Everything typed into a terminal program is keystrokes, so the text is made inert before it is typed:

- Terminal control characters cannot act as keys or end the bracketed paste early: ESC and the other C0
  controls (except newline and tab), DEL and the C1 controls are replaced by visible stand-ins (ESC
  becomes ``␛``, NUL ``␀``, ... the Unicode "control pictures"; DEL ``␡``; C1 ``<U+0085>``). CR and CRLF
  become a newline. Nothing can then spell the paste-end sequence ``ESC [ 201 ~``.
- The message never starts with a character that the TUI treats as a command or mode prefix (``/`` slash
  commands, ``!`` shell mode, ...; leading whitespace does not protect, Kimi trims it) and is never a bare
  command word (``exit``): such a message gets a first line ``Message:``.
- Kimi Code turns every tab into four spaces on input, so for Kimi Code a tab is sent as ``⇥`` and the
  message ends with a note saying so (the model can write real tabs back); kimi-cli keeps tabs.
- Kimi Code expands ``/name`` words naming one of its skills into the skill's text, and kimi-cli replaces
  ``[Pasted text #N]`` and ``[image:id]`` by earlier pastes and cached images: such a word or bracket gets
  a WORD JOINER (U+2060, invisible) after its ``/`` or ``[``'s position so that nothing expands it.
- A message that would not reach the model whole is refused before Kimi starts (:func:`check_size`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import BadInput

__all__ = [
    "TAB_MARK",
    "MessageRules",
    "check_size",
    "estimated_tokens",
    "guard_placeholders",
    "neutralize",
    "one_line",
    "prepare",
]

TAB_MARK = "\u21e5"  # ⇥
TAB_NOTE = f"(Note from kimi-mcp: each {TAB_MARK} in this message stands for one tab character.)"
GUARD_LINE = "Message:"
WORD_JOINER = "\u2060"
_COMMAND_WORDS = frozenset({"exit", "quit", "q", "help", "clear", "reset"})


@dataclass(frozen=True, slots=True)
class MessageRules:
    """What one dialect's input box does to text (facts measured on the real binaries)."""

    keeps_tabs: bool
    #: the largest message, in tokens as Kimi itself estimates them, that reaches the model whole
    max_tokens: int
    #: names Kimi expands when written as ``/name`` after whitespace (skills); empty when it does not
    skill_names: frozenset[str] = frozenset()


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"<U+{code:04X}>"


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def neutralize(text: str) -> str:
    """``text`` with CR/CRLF as newlines and every other control character made visible (tabs kept)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub(_picture, text)


def one_line(text: str) -> str:
    """``text`` neutralized and on one line (for one-line inputs such as approval feedback)."""
    return " ".join(neutralize(text).replace("\t", " ").split("\n"))


def _needs_guard(text: str) -> bool:
    head = text.lstrip()
    if not head:
        return False
    return (
        not head[0].isalnum()
        or head.split(maxsplit=1)[0].lower() in _COMMAND_WORDS
        and len(head.split()) == 1
    )


def _guard_skills(text: str, names: frozenset[str]) -> str:
    if not names:
        return text

    def guard(match: re.Match[str]) -> str:
        name = match.group(2)
        known = name in names or (name.startswith("skill:") and name[6:] in names)
        return match.group(1) + (WORD_JOINER if known else "") + "/" + name

    return re.sub(r"(^|\s)/([^\s/]+)(?=\s|$)", guard, text)


_PLACEHOLDER = re.compile(r"\[(?=Pasted text #\d+|[A-Za-z0-9_\-]+:[A-Za-z0-9_\-.]+(?:,\d+x\d+)?\])")


def guard_placeholders(text: str) -> str:
    """``text`` with a WORD JOINER after the ``[`` of anything kimi-cli would expand (``[Pasted text #N]``,
    ``[image:id]``)."""
    return _PLACEHOLDER.sub("[" + WORD_JOINER, text)


def prepare(text: str, rules: MessageRules) -> str:
    """The message to type for ``text``: neutralized, guarded, tabs handled per dialect."""
    message = neutralize(text)
    if not rules.keeps_tabs and "\t" in message:
        message = message.replace("\t", TAB_MARK).rstrip() + "\n\n" + TAB_NOTE
    message = guard_placeholders(message)
    message = _guard_skills(message, rules.skill_names)
    if _needs_guard(message):
        message = GUARD_LINE + "\n" + message
    return message


def estimated_tokens(text: str) -> int:
    """Kimi Code's own estimate: a quarter token per ASCII character, one per other code point."""
    ascii_chars = sum(1 for char in text if ord(char) < 128)
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def check_size(message: str, rules: MessageRules, parts: Iterable[str] = ()) -> None:
    """BadInput when ``message`` is too large to reach the model as one whole message."""
    tokens = estimated_tokens(message)
    if tokens <= rules.max_tokens:
        return
    named = ", ".join(parts)
    raise BadInput(
        f"the message for Kimi is about {tokens:,} tokens ({len(message):,} characters), over the "
        f"{rules.max_tokens:,} tokens Kimi takes as one whole message",
        details={"estimated_tokens": tokens, "characters": len(message), "limit_tokens": rules.max_tokens},
        suggestion=(
            "Shorten the text fields"
            + (f" ({named})" if named else "")
            + " or pass fewer or smaller context files; Kimi can read files in the workspace itself when "
            "the task names them."
        ),
    )
