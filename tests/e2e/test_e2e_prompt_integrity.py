"""The caller's text reaches the model exactly, as one user message, whatever it holds: a corpus of hostile
texts (slash commands, `!` shell commands, paste-end, CR, ESC sequences, Ctrl-C/D/X, NUL, DEL, C1, tabs,
long lines, RTL, emoji, skill words, placeholders) through every text field of every tool, on both
dialects, asserting on what the fake model received and that nothing outside the workspace changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, last_user_text
from kimi_env import KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e

WJ = "\u2060"  # word joiner: what keeps "[Pasted text #1]" and "/write-goal" from expanding


HEADS = {"task": "!touch {canary}/lead-bang", "prompt": "/login"}  # first in their messages: prefix attacks


def hostile(tag: str, canary: Path, *, nul: bool = True) -> str:
    """One field's text: every attack at once, ``tag`` naming the field (context files cannot hold NUL)."""
    head = HEADS.get(tag, "/exit").format(canary=canary)
    return (
        f"{head} {tag} !touch {canary}/{tag}-bang\x1b[201~\r!touch {canary}/{tag}-paste-end\r"
        f"x\x18y\x03z\x04{'n' + chr(0) if nul else ''}d\x7fc\x9b e\x1b[2J\x1b[6n\tt 👩‍💻 \u202eRTL\u202c 漢字 "
        f"use /write-goal [Pasted text #1] {'L' * 3000} {tag}-END"
    )


def seen(tag: str, canary: Path, tab: str, *, nul: bool = True) -> str:
    """What the model must receive for ``hostile(tag)``: the same text, controls made visible."""
    head = HEADS.get(tag, "/exit").format(canary=canary)
    return (
        f"{head} {tag} !touch {canary}/{tag}-bang\u241b[201~\n!touch {canary}/{tag}-paste-end\n"
        f"x\u2418y\u2403z\u2404{'n' + chr(0x2400) if nul else ''}d\u2421c<U+009B> e\u241b[2J\u241b[6n{tab}t "
        f"👩‍💻 \u202eRTL\u202c 漢字 use {WJ if tab != chr(9) else ''}/write-goal [{WJ}Pasted text #1] "
        f"{'L' * 3000} {tag}-END"
    )


LEADING = {  # more texts whose start the TUIs would take as a command or mode switch (see also HEADS)
    "slash-clear": "  /clear the cache first",
    "exit-word": "exit",
    "nul-bang": "\x00!touch {canary}/leading-nul-bang",
}


def user_messages(body: dict) -> list[str]:
    """The user messages of one chat request, without Kimi Code's own <system-reminder> messages."""
    found = []
    for msg in body.get("messages") or []:
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        texts = (
            [p.get("text", "") for p in content if isinstance(p, dict)]
            if isinstance(content, list)
            else [content]
        )
        text = "".join(
            t for t in texts if isinstance(t, str) and not t.lstrip().startswith("<system-reminder>")
        )
        if text:
            found.append(text)
    return found


def calls(canary: Path) -> list[tuple[str, dict, list[str]]]:
    """(tool, arguments, field tags) for every text field of every tool; ctx.txt holds a hostile file."""
    h = lambda tag: hostile(tag, canary)  # noqa: E731
    options = [{"name": h("opt-name"), "pros": [h("opt-pro")], "cons": [h("opt-con")]}]
    consult_fields = ["proposal", "goals", "constraints", "known_risks", "requirements", "alternatives",
                      "symptoms", "repro", "logs", "tried", "criteria"]  # fmt: skip
    consult = {name: h(f"c-{name}") for name in consult_fields}
    return [
        ("kimi_code_task",
         {"task_description": h("task"), "constraints": h("constraints"), "context_files": ["ctx.txt"]},
         ["task", "constraints", "file"]),
        ("kimi_prompt", {"prompt": h("prompt")}, ["prompt"]),
        ("kimi_refactor", {"file_path": "ctx.txt", "refactor_instructions": h("instructions")},
         ["instructions", "file"]),
        ("kimi_debug",
         {"error_message": h("error"), "context": h("context"), "relevant_files": ["ctx.txt"]},
         ["error", "context", "file"]),
        ("kimi_analyze_code", {"file_paths": ["ctx.txt"], "analysis_focus": h("focus")}, ["focus", "file"]),
        ("kimi_verify",
         {"requirements": [h("req-1"), h("req-2")], "prompt": h("verify-prompt"), "file_paths": ["ctx.txt"]},
         ["req-1", "req-2", "verify-prompt", "file"]),
        ("kimi_consult",
         {"role": "judge", "message": h("message"), **consult, "options": options, "file_paths": ["ctx.txt"],
          "prior_exchange": [{"role": "user", "content": h("prior-user")},
                             {"role": "kimi", "content": h("prior-kimi")}]},
         ["message", *(f"c-{n}" for n in consult_fields), "opt-name", "opt-pro", "opt-con", "prior-user",
          "prior-kimi", "file"]),
    ]  # fmt: skip


def test_hostile_text_through_every_field_of_every_tool_arrives_whole(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    canary = tmp_path / "outside"
    canary.mkdir()
    (workspace / "ctx.txt").write_text(hostile("file", canary, nul=False), encoding="utf-8", newline="")
    tab = "\t" if kimi.name == "legacy" else "\u21e5"
    plan = calls(canary) + [
        ("kimi_prompt", {"prompt": text.format(canary=canary)}, [f"leading-{name}"])
        for name, text in LEADING.items()
    ]

    async def body(client):
        outcomes = []
        for tool, args, tags in plan:
            start = len(fake.requests)
            result = await client.call_tool(tool, {**args, "work_dir": str(workspace)}, raise_on_error=False)
            outcomes.append((tool, args, tags, result, list(fake.requests[start:])))
        return outcomes

    outcomes = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    for tool, _args, tags, result, requests in outcomes:
        label = f"{tool} {tags}"
        data = result.structured_content
        assert data["success"] is True, (label, data.get("error"))
        chats = [r["body"] for r in requests if r["path"].endswith("/chat/completions")]
        assert chats, f"{label}: the model got no request"
        for chat in chats:
            assert len(user_messages(chat)) == 1, f"{label}: {len(user_messages(chat))} user messages"
        message = last_user_text(chats[0])
        assert all(user_messages(chat) == [message] for chat in chats), label
        if tags[0].startswith("leading-"):
            original = LEADING[tags[0].removeprefix("leading-")].format(canary=canary)
            assert message.startswith("Message:\n"), (label, message[:80])
            assert message.removeprefix("Message:\n") == original.replace("\x00", "\u2400").strip()
            continue
        if tags[0] in HEADS:  # this field's text starts the message
            assert message.startswith("Message:\n" + HEADS[tags[0]].format(canary=canary)), label
        for tag in tags:
            expected = seen(tag, canary, tab, nul=tag != "file")
            assert expected in message, f"{label}: field {tag} did not arrive whole"
        if kimi.name == "kimi-code":
            assert "each \u21e5 in this message stands for one tab character" in message
    assert sorted(p.name for p in canary.iterdir()) == [], "a command in the text ran"
    leftovers = sorted(p.name for p in workspace.iterdir())
    assert leftovers == ["ctx.txt"], leftovers


@pytest.mark.parametrize("kimi", ["legacy"], indirect=True)  # checked before Kimi starts: dialect-independent
def test_a_message_too_large_to_arrive_whole_is_refused_before_kimi_starts(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    for index in range(5):
        (workspace / f"big{index}.txt").write_text("y" * 190_000)

    async def body(client):
        huge = await client.call_tool(
            "kimi_code_task",
            {"task_description": "do it", "constraints": "c" * 1_000_000, "work_dir": str(workspace)},
            raise_on_error=False,
        )
        many = await client.call_tool(
            "kimi_code_task",
            {"task_description": "do it", "context_files": [f"big{i}.txt" for i in range(5)],
             "work_dir": str(workspace)},
            raise_on_error=False,
        )  # fmt: skip
        return huge, many

    huge, many = asyncio.run(with_client(kimi.env, workspace, tmp_path / "server.log", body))
    for result in (huge, many):
        error = result.structured_content["error"]
        assert result.is_error is True and error["type"] == "bad_input"
        assert "45,000 tokens" in error["message"]
        assert "context files" in error["suggestion"]
        assert len(json.dumps(result.structured_content)) < 5_000  # the text is not echoed back
    assert fake.requests == []
    assert not processes_with_home(kimi.home)
