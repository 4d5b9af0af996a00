"""The parameters the Kimi tools share (issue 29): each Kimi tool's ``inputSchema`` is its own arguments,
then exactly the shared ones (these names in this order, with these types, limits, descriptions and
defaults), only its own are required, and nothing injected shows; every shared value a caller passes reaches
the call's jobs."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from kimi_mcp.config import Settings, state_dir
from kimi_mcp.jobs import STORE_FILE, JobStore
from kimi_mcp.models import GOING, TaskResult
from kimi_mcp.server import create_server

MODEL_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
STRING_OR_NULL = [{"type": "string"}, {"type": "null"}]

#: every Kimi tool's shared parameters, in this order
SHARED: dict[str, dict[str, Any]] = {
    "work_dir": {
        "anyOf": STRING_OR_NULL,
        "default": None,
        "description": "Workspace directory (default: the client's root, KIMI_MCP_WORKSPACE or cwd)",
    },
    "wait_s": {
        "anyOf": [{"minimum": 0, "type": "number"}, {"type": "null"}],
        "default": None,
        "description": "Seconds to wait for Kimi's turn (default: until it is done, or KIMI_MCP_WAIT_S). If the "
        "turn is still going then, the result has status 'running' and a job_id: the turn goes on, and "
        "kimi_job(job_id) waits for it",
    },
    "model": {
        "anyOf": [{"maxLength": 128, "pattern": MODEL_PATTERN, "type": "string"}, {"type": "null"}],
        "default": None,
        "description": "The model Kimi uses for this call: one of Kimi's model aliases or model names "
        "(kimi_status lists them; default: KIMI_MCP_MODEL, else Kimi's default model)",
    },
    "max_tokens": {
        "anyOf": [{"minimum": 1, "type": "integer"}, {"type": "null"}],
        "default": None,
        "description": "Token limit of this job: Kimi's input + output tokens summed over its steps (and "
        "attempts); past it Kimi is stopped and the result is error type 'budget' with the files changed so "
        "far. Default: KIMI_MCP_MAX_TOKENS (unset: no limit)",
    },
    "group": {
        "anyOf": [{"pattern": "^[A-Za-z0-9._-]{1,100}$", "type": "string"}, {"type": "null"}],
        "default": None,
        "description": "A name for a set of jobs (1-100 characters of A-Za-z0-9._-): kimi_wait(group=...) "
        "waits for them, kimi_jobs(group=...) lists them, kimi_job(action='cancel', group=...) cancels them",
    },
    "dry_run": {
        "type": "boolean",
        "default": False,
        "description": "true: start nothing and store nothing; the result's dry_run says what the call would "
        "do (Kimi's message: its size and tokens, the files sent, the secret files redacted, what would be cut; "
        "the workspace, model, isolation, where it runs, the token limit), usage.cost_usd its input's price "
        "with KIMI_MCP_PRICES",
    },
}
#: the write tools' shared parameters after those
SHARED_WRITE: dict[str, dict[str, Any]] = {
    "approvals": {
        "anyOf": [{"enum": ["policy", "ask"], "type": "string"}, {"type": "null"}],
        "default": None,
        "description": "policy: kimi-mcp approves Kimi's commands and edits inside the workspace by its rules. "
        "ask: each of those approvals is asked of you like a question (status 'waiting', question.kind "
        "'approval'; answer 'approve', 'reject', or feedback text). What the rules forbid is rejected either "
        "way. Default: KIMI_MCP_APPROVALS (policy)",
    },
    "isolation": {
        "anyOf": [{"enum": ["none", "worktree"], "type": "string"}, {"type": "null"}],
        "default": None,
        "description": "none: Kimi edits your tree. worktree: Kimi works on an isolated copy of your git tree "
        "(uncommitted and untracked files included); the result has the diff, your tree is untouched until "
        "kimi_apply(job_id) (kimi_discard drops it). Default: KIMI_MCP_ISOLATION (none)",
    },
    "attempts": {
        "type": "integer",
        "minimum": 1,
        "maximum": 4,
        "default": 1,
        "description": "worktree only: run this many independent Kimi attempts at once, each on its own copy; "
        "the result lists them best first (verify passed, then the smaller diff)",
    },
    "verify_command": {
        "anyOf": [{"maxLength": 10000, "type": "string"}, {"type": "null"}],
        "default": None,
        "description": "A shell command run where Kimi worked (each isolated copy, else the workspace) after "
        "its turn (e.g. 'pytest -q'); its exit code and output tail are the result's verify and rank the "
        "attempts (time limit KIMI_MCP_VERIFY_TIMEOUT)",
    },
}
#: then the fix loop's, on the write tools that loop until the checks pass (issue 31 item 3)
SHARED_FIX: dict[str, dict[str, Any]] = {
    "fix_rounds": {
        "type": "integer",
        "minimum": 0,
        "maximum": 5,
        "default": 0,
        "description": "0-5, needs verify_command: while it fails, the same conversation gets up to this many "
        "more turns with the command, its exit code and its output's end (masked, 4,000 characters), until "
        "it passes or max_tokens, the daily budget or the time runs out; the result lists the rounds",
    },
}
#: each Kimi tool's own parameters in order, the required ones, and the shared ones it takes
OWN: dict[str, tuple[list[str], list[str], dict[str, dict[str, Any]]]] = {
    "kimi_code_task": (
        ["task_description", "context_files", "constraints"],
        ["task_description"],
        SHARED | SHARED_WRITE | SHARED_FIX,
    ),
    "kimi_prompt": (["prompt", "include_workspace_context"], ["prompt"], SHARED | SHARED_WRITE),
    "kimi_refactor": (
        ["file_path", "refactor_instructions", "safety_checks"],
        ["file_path", "refactor_instructions"],
        SHARED | SHARED_WRITE | SHARED_FIX,
    ),
    "kimi_debug": (
        ["error_message", "relevant_files", "context"], ["error_message"], SHARED | SHARED_WRITE | SHARED_FIX,
    ),
    "kimi_analyze_code": (["file_paths", "analysis_focus", "role"], ["file_paths"], SHARED),
    "kimi_verify": (["requirements", "file_paths", "prompt"], ["requirements", "file_paths"], SHARED),
    "kimi_consult": (
        [
            "role", "message", "proposal", "goals", "constraints", "known_risks", "requirements",
            "alternatives", "symptoms", "repro", "logs", "tried", "options", "criteria", "file_paths",
            "prior_exchange",
        ],
        ["role", "message"],
        SHARED,
    ),
    "kimi_review": (["range", "focus"], [], SHARED),
}  # fmt: skip
#: each Kimi tool's own arguments for a call on the ``repo`` fixture
ARGUMENTS: dict[str, dict[str, Any]] = {
    "kimi_code_task": {"task_description": "add f", "context_files": ["app.py"]},
    "kimi_prompt": {"prompt": "explain"},
    "kimi_refactor": {"file_path": "app.py", "refactor_instructions": "rename"},
    "kimi_debug": {"error_message": "NameError: y", "relevant_files": ["app.py"]},
    "kimi_analyze_code": {"file_paths": ["app.py"]},
    "kimi_verify": {"requirements": "has one", "file_paths": ["app.py"]},
    "kimi_consult": {"role": "skeptic", "message": "ok?", "file_paths": ["app.py"]},
    "kimi_review": {"range": "working_tree"},
}


class Gate:
    """A fake Kimi turn that waits until the gate opens; records each request."""

    def __init__(self, *, opened: bool = True) -> None:
        self.requests: list[Any] = []
        self.open = threading.Event()
        if opened:
            self.open.set()

    def __call__(self, request, settings, **_kwargs) -> TaskResult:
        self.requests.append(request)
        assert self.open.wait(60)
        return TaskResult(success=True, workspace=str(request.workspace), output="{}")


def listed_schemas() -> dict[str, dict[str, Any]]:
    async def body():
        async with Client(create_server(Settings(), run=Gate())) as client:
            return {tool.name: tool.input_schema for tool in await client.list_tools()}

    return asyncio.run(body())


def stored_specs(tool: str, group: str | None = None) -> list[dict[str, Any]]:
    """The specs of ``tool``'s jobs in the store (each of them in ``group``)."""
    store = JobStore(state_dir(Settings(), os.environ) / STORE_FILE)
    try:
        records = [record for record in store.list() if record.tool == tool]
        specs = [store.spec(record.job_id) for record in records]
    finally:
        store.close()
    assert all(spec is not None for spec in specs)
    assert [record.group for record in records] == [group] * len(records)
    return specs  # type: ignore[return-value]


def test_each_kimi_tool_lists_its_own_arguments_then_exactly_the_shared_ones() -> None:
    schemas = listed_schemas()
    for tool, (own, required, shared) in OWN.items():
        schema = schemas[tool]
        properties = schema["properties"]
        assert list(properties) == [*own, *shared], tool  # nothing injected (ctx, backend, options) shows
        assert schema.get("required", []) == required, tool
        for name, expected in shared.items():
            assert properties[name] == expected, (tool, name)
        for name in own:  # each own argument keeps a type of its own (none became an untyped "any")
            assert {"type", "anyOf", "$ref"} & set(properties[name]), (tool, name)


def call(gate: Gate, tool: str, arguments: dict[str, Any]) -> tuple[dict, dict]:
    """Call ``tool``, open the gate, then wait for the job with ``kimi_job``: (the call's reply, the job's)."""

    async def body() -> tuple[dict, dict]:
        async with Client(create_server(Settings(), run=gate)) as client:
            first = await client.call_tool(tool, arguments, raise_on_error=False)
            gate.open.set()
            job_id = first.structured_content["job_id"]
            done = await client.call_tool("kimi_job", {"job_id": job_id, "wait_s": 60}, raise_on_error=False)
            return first.structured_content, done.structured_content

    return asyncio.run(body())


@pytest.mark.parametrize("tool", list(OWN))
def test_every_shared_value_reaches_the_calls_jobs(tool: str, repo: Path) -> None:
    writes = "approvals" in OWN[tool][2]
    shared: dict[str, Any] = {"work_dir": str(repo), "model": "k2", "max_tokens": 900, "group": "team.a-1"}
    if writes:
        shared |= {"approvals": "ask", "isolation": "worktree", "attempts": 2, "verify_command": "true"}
    fixes = "fix_rounds" in OWN[tool][2]
    if fixes:
        shared |= {"fix_rounds": 3}
    gate = Gate()
    first, _ = call(gate, tool, ARGUMENTS[tool] | shared)
    assert first["success"] is True and first["group"] == "team.a-1", first
    specs = stored_specs(tool, "team.a-1")
    assert len(specs) == len(gate.requests) == (2 if writes else 1)  # attempts: one job each
    assert len(first.get("attempts") or [None]) == len(specs)
    for spec, request in zip(specs, gate.requests, strict=True):
        assert spec["workspace"] == str(repo.resolve()) and spec["read_only"] is not writes
        assert (spec["model"], spec["max_tokens"], request.model) == ("k2", 900, "k2")
        if writes:
            assert (spec["approvals"], spec["isolation"], spec["verify_command"]) == (
                "ask",
                "worktree",
                "true",
            )
            assert (spec["fix_rounds"], request.fix_rounds) == ((3, 3) if fixes else (0, 0))
            assert request.verify_command == "true"
        else:
            assert (spec["approvals"], spec["isolation"], spec["verify_command"]) == ("policy", "none", None)


@pytest.mark.parametrize("tool", list(OWN))
def test_wait_s_reaches_the_calls_wait(tool: str, repo: Path) -> None:
    gate = Gate(opened=False)
    first, done = call(gate, tool, ARGUMENTS[tool] | {"work_dir": str(repo), "wait_s": 0})
    # wait_s=0: the call answered at once with the job going on (its status, a job_id, no verdict yet)
    assert first["status"] in GOING and first["success"] is None, first
    assert done["status"] == "done" and done["job_id"] == first["job_id"], done


def test_attempts_still_running_when_wait_s_ends_reply_with_their_status(repo: Path) -> None:
    """Two attempts whose ``wait_s`` runs out: the reply is the running job with every attempt listed as
    running and not (yet) successful (an attempt's ``success`` of ``None`` was refused by AttemptSummary)."""
    gate = Gate(opened=False)
    args = {"task_description": "add f", "work_dir": str(repo), "isolation": "worktree", "attempts": 2}
    first, done = call(gate, "kimi_code_task", args | {"wait_s": 0})
    assert first["status"] in GOING and first["job_id"], first
    assert [a["status"] in GOING and a["success"] is False for a in first["attempts"]] == [True, True], first
    assert done["status"] == "done", done
