"""The full tool surface end to end: fastmcp.Client → kimi-mcp → real Kimi (both dialects) → fake API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from kimi_env import KimiUnderTest
from mcp.shared.exceptions import MCPError
from mcp_helpers import call_tool, processes_with_home, with_client
from mcp_types import INVALID_PARAMS

pytestmark = pytest.mark.e2e

READ_ONLY = {"kimi_analyze_code", "kimi_verify", "kimi_consult", "kimi_review"}
WRITE = {"kimi_code_task", "kimi_prompt", "kimi_refactor", "kimi_debug"}


def fenced(payload: dict, prose: str = "Here is my answer.") -> Reply:
    return Reply.text_reply(f"{prose}\n\n```json\n{json.dumps(payload, indent=2)}\n```\n")


def call(kimi: KimiUnderTest, workspace: Path, tmp_path: Path, tool: str, args: dict):
    result = call_tool(
        kimi.env, workspace, tmp_path / "server.log", tool, {"work_dir": str(workspace), **args}
    )
    return result, result.structured_content


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text(errors="replace")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_an_unknown_jobs_resource_is_resource_not_found(legacy_env: dict, workspace: Path, tmp_path: Path):
    """The MCP spec's "resource not found" (INVALID_PARAMS, the URI in data), not an internal error with a
    traceback in the server's log."""
    uri = "kimi-mcp://jobs/job_0000000000000000/output"

    async def body(client):
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)
        return raised.value

    error = asyncio.run(with_client(legacy_env, workspace, tmp_path / "server.log", body))
    assert error.code == INVALID_PARAMS and error.data == {"uri": uri}, (
        error.code,
        error.message,
        error.data,
    )
    assert "no finished job 'job_0000000000000000'" in error.message
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "Error reading resource" not in log, log[-3000:]


def test_tools_are_listed_with_annotations_and_schemas(legacy_env: dict, workspace: Path, tmp_path: Path):
    async def body(client):
        return await client.list_tools()

    tools = {t.name: t for t in asyncio.run(with_client(legacy_env, workspace, tmp_path / "s.log", body))}
    others = {
        "kimi_job",
        "kimi_jobs",
        "kimi_continue",
        "kimi_steer",
        "kimi_status",
        "kimi_apply",
        "kimi_discard",
        "kimi_wait",
    }
    assert set(tools) == READ_ONLY | WRITE | others
    for name in READ_ONLY | {"kimi_jobs", "kimi_status", "kimi_wait"}:
        assert tools[name].annotations.read_only_hint is True, name
        assert tools[name].annotations.destructive_hint is False, name
    for name in WRITE | {"kimi_job", "kimi_continue", "kimi_apply", "kimi_discard"}:  # cancel; may write
        assert tools[name].annotations.read_only_hint is False, name
        assert tools[name].annotations.destructive_hint is True, name
    for tool in tools.values():
        assert tool.output_schema and "success" in tool.output_schema["properties"], tool.name
        assert tool.description and len(tool.description) > 60
    assert {"verdict", "findings", "unmet_requirements"} <= set(
        tools["kimi_verify"].output_schema["properties"]
    )
    consult = tools["kimi_consult"].output_schema["properties"]
    assert {"parse_ok", "response", "key_risks", "assumptions", "alternatives", "confidence"} <= set(consult)
    assert set(tools["kimi_consult"].input_schema["properties"]["role"]["enum"]) == {
        "skeptic", "architect", "debugger", "judge",
    }  # fmt: skip


def test_tool_allow_list(legacy_env: dict, workspace: Path, tmp_path: Path):
    env = dict(legacy_env, KIMI_MCP_TOOLS="kimi_consult")

    async def body(client):
        return [t.name for t in await client.list_tools()]

    assert asyncio.run(with_client(env, workspace, tmp_path / "s.log", body)) == ["kimi_consult"]


def test_read_only_tool_cannot_change_anything(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (workspace / "canary.txt").write_text("untouched\n")
    before = tree(workspace)
    read_tool = ("ReadFile" if kimi.name == "legacy" else "Read", {"path": "app.py"})
    fake.script(
        [
            Reply.tools([read_tool]),
            Reply.tools(
                [
                    kimi.write("canary.txt", "overwritten by a read-only task\n"),
                    kimi.write("evil.txt", "should not exist\n"),
                    kimi.shell("echo pwned > pwned.txt; rm canary.txt"),
                ]
            ),
            fenced(
                {
                    "analysis": "add() subtracts instead of adding.",
                    "suggestions": [
                        {
                            "title": "Fix operator",
                            "detail": "use +",
                            "file": "app.py",
                            "line": 2,
                            "severity": "high",
                        }
                    ],
                }
            ),
        ]
    )
    result, data = call(
        kimi, workspace, tmp_path, "kimi_analyze_code", {"file_paths": ["app.py"], "role": "general"}
    )
    assert tree(workspace) == before, "a read-only tool changed the workspace"
    assert data["files_created"] == data["files_modified"] == data["files_deleted"] == []
    assert data["success"] is True, data["error"]
    runs = {t["name"]: t for t in data["evidence"]["tools_run"]}
    assert runs[kimi.shell_tool]["approval"] == "rejected"
    assert all(
        t["is_error"]
        for t in data["evidence"]["tools_run"]
        if t["name"] in (kimi.write_tool, kimi.shell_tool)
    )
    assert "app.py" in data["evidence"]["files_read"]
    assert data["parse_ok"] is True
    assert data["analysis"] == "add() subtracts instead of adding."
    assert data["suggestions"][0]["line"] == 2 and data["suggestions"][0]["severity"] == "high"
    prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "read-only" in prompt.lower() and "return a - b" in prompt
    assert not processes_with_home(kimi.home)


@pytest.mark.parametrize(
    "kimi", ["legacy"], indirect=True
)  # one dialect: parsing Kimi's answer is above the runner
def test_verify_returns_verdict_and_findings(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "api.py").write_text("def get(user):\n    return db[user]\n")
    fake.script(
        [
            fenced(
                {
                    "verdict": "partial",
                    "findings": [
                        {
                            "requirement": "returns user",
                            "status": "met",
                            "file": "api.py",
                            "line": 2,
                            "detail": "ok",
                        },
                        {
                            "requirement": "handles missing user",
                            "status": "unmet",
                            "file": "api.py",
                            "line": 2,
                            "detail": "KeyError",
                        },
                    ],
                    "unmet_requirements": ["handles missing user"],
                }
            )
        ]
    )
    result, data = call(
        kimi,
        workspace,
        tmp_path,
        "kimi_verify",
        {"requirements": ["returns user", "handles missing user"], "file_paths": ["api.py"]},
    )
    assert data["parse_ok"] is True and data["verdict"] == "partial"
    assert data["unmet_requirements"] == ["handles missing user"]
    assert [f["status"] for f in data["findings"]] == ["met", "unmet"]
    assert data["findings"][1]["file"] == "api.py" and data["findings"][1]["line"] == 2
    prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "handles missing user" in prompt and "return db[user]" in prompt


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # one dialect: parsing Kimi's answer is above the runner
def test_consult_parses_and_survives_malformed_answers(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    fake.script(
        [
            fenced(
                {
                    "response": "Caching per request is risky.",
                    "key_risks": ["stale data", "memory growth"],
                    "assumptions": ["single process"],
                    "alternatives": ["HTTP caching"],
                    "confidence": 0.7,
                    "evidence": ["no invalidation in cache.py"],
                }
            )
        ],
        marker="ROUND-ONE",
    )
    fake.script([Reply.text_reply("I think it's fine {but this is not json: [1, 2")], marker="ROUND-TWO")
    args = {
        "role": "skeptic",
        "message": "ROUND-ONE Should we add a cache?",
        "proposal": "Add an in-memory cache to every request handler",
        "goals": "Lower latency",
        "known_risks": "Consistency",
    }
    result, data = call(kimi, workspace, tmp_path, "kimi_consult", args)
    assert data["parse_ok"] is True, data["raw_response_preview"]
    assert data["response"] == "Caching per request is risky."
    assert data["key_risks"] == ["stale data", "memory growth"]
    assert data["confidence"] == 0.7 and data["role"] == "skeptic"
    assert data["evidence"]["cited"] == ["no invalidation in cache.py"]
    prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "Add an in-memory cache to every request handler" in prompt and "Lower latency" in prompt

    follow_up = {
        "role": "skeptic",
        "message": "ROUND-TWO what about a TTL?",
        "prior_exchange": [
            {"role": "user", "content": "Should we add a cache?"},
            {"role": "kimi", "content": "Caching per request is risky."},
        ],
    }
    result, data = call(kimi, workspace, tmp_path, "kimi_consult", follow_up)
    assert result.is_error is False
    assert data["success"] is True and data["parse_ok"] is False
    assert "not json" in data["raw_response_preview"]
    assert data["response"].startswith("I think it's fine")
    last_prompt = json.dumps(fake.chat_requests()[-1]["body"]["messages"])
    assert "Caching per request is risky." in last_prompt  # the prior round reached Kimi


@pytest.mark.parametrize(
    "kimi", ["kimi-code"], indirect=True
)  # one dialect: the refactor's diff is the tracker's
def test_refactor_reports_diff_and_other_changed_files(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    original = "def f(x):\n    y = x * 2\n    return y\n"
    refactored = "def double(x):\n    return x * 2\n"
    (workspace / "calc.py").write_text(original)
    (workspace / "notes.md").write_text("notes\n")
    fake.script(
        [
            Reply.tools([kimi.write("calc.py", refactored), kimi.shell("echo touched >> notes.md")]),
            fenced(
                {"explanation": "Renamed f to double and inlined y.", "behavior_preserved": True, "risks": []}
            ),
        ]
    )
    result, data = call(
        kimi,
        workspace,
        tmp_path,
        "kimi_refactor",
        {"file_path": "calc.py", "refactor_instructions": "rename f to double, inline y"},
    )
    assert data["success"] is True and data["parse_ok"] is True
    assert data["original_content"] == original and data["refactored_content"] == refactored
    assert "-def f(x):" in data["diff"] and "+def double(x):" in data["diff"]
    assert data["explanation"] == "Renamed f to double and inlined y."
    assert data["behavior_preserved"] is True
    assert data["files_modified"] == ["calc.py", "notes.md"]
    assert data["other_files_changed"] == ["notes.md"]
    prompt = json.dumps(fake.chat_requests()[0]["body"]["messages"])
    assert "rename f to double" in prompt and "behavio" in prompt.lower()


@pytest.mark.parametrize("kimi", ["kimi-code"], indirect=True)  # one dialect: the report is the tracker's
def test_debug_fixes_and_reports_code_changes(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "app.py").write_text("def add(a, b):\n    return a - b\n")
    fake.script(
        [
            Reply.tool(*kimi.write("app.py", "def add(a, b):\n    return a + b\n")),
            fenced(
                {
                    "diagnosis": "add() used subtraction.",
                    "root_cause": "wrong operator",
                    "solution": "use +",
                    "code_changes": [{"path": "app.py", "description": "- to +"}],
                }
            ),
        ]
    )
    result, data = call(
        kimi,
        workspace,
        tmp_path,
        "kimi_debug",
        {"error_message": "AssertionError: add(2, 2) == 0", "relevant_files": ["app.py"]},
    )
    assert data["success"] is True and data["parse_ok"] is True
    assert data["diagnosis"] == "add() used subtraction." and data["root_cause"] == "wrong operator"
    assert data["files_modified"] == ["app.py"]
    change = data["code_changes"][0]
    assert change["path"] == "app.py" and change["description"] == "- to +"
    assert "-    return a - b" in change["diff"] and "+    return a + b" in change["diff"]
    assert (workspace / "app.py").read_text().endswith("a + b\n")


@pytest.mark.parametrize(
    "kimi", ["legacy"], indirect=True
)  # one dialect: the prompt and budget are above the runner
def test_prompt_with_workspace_context_and_result_budget(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print(1)\n")
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "artifact.bin").write_text("x")
    kimi.env["KIMI_MCP_MAX_RESULT_CHARS"] = "6000"
    fake.script(
        [
            Reply.tools([kimi.write(f"gen{i}.txt", f"{i}" * 3000) for i in range(4)]),
            Reply.text_reply("Generated four files."),
        ]
    )
    result, data = call(
        kimi,
        workspace,
        tmp_path,
        "kimi_prompt",
        {"prompt": "generate files", "include_workspace_context": True},
    )
    assert data["success"] is True
    assert data["files_created"] == ["gen0.txt", "gen1.txt", "gen2.txt", "gen3.txt"]
    assert len(json.dumps(data, ensure_ascii=False, separators=(",", ":"))) <= 6000  # exactly honoured
    assert len(result.content[0].text) <= 6000
    cut = {t["path"]: t for t in data["truncated"] if t["reason"] == "result_budget"}
    assert len(cut) == len([t for t in data["truncated"] if t["reason"] == "result_budget"])  # each once
    for i in range(4):  # every file keeps the same head; none is dropped for another to stay whole
        path = f"gen{i}.txt"
        assert cut[path]["size_bytes"] == 3000 and 0 < cut[path]["returned_chars"] < 3000
        assert data["file_contents"][path].startswith(f"{i}" * cut[path]["returned_chars"])
    assert len({cut[f"gen{i}.txt"]["returned_chars"] for i in range(4)}) == 1
    ours = [m for m in fake.chat_requests()[0]["body"]["messages"] if "generate files" in json.dumps(m)]
    assert len(ours) == 1  # our user message (Kimi's own system prompt may list the directory too)
    assert "src/main.py" in json.dumps(ours) and "artifact.bin" not in json.dumps(ours)
