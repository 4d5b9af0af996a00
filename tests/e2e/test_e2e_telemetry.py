"""OpenTelemetry end to end: a real MCP client → the real server (OTEL_EXPORTER_OTLP_ENDPOINT set) → a real
Kimi on the fake API; a real OTLP/HTTP receiver of the test's own decodes what the server exports. (A job on
a worker continuing the trace is in test_e2e_remote.py, beside the Redis and worker fixtures.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from git_helpers import committed_repo
from kimi_env import KimiUnderTest
from mcp_helpers import transport
from otlp_receiver import OtlpReceiver, Span

pytestmark = pytest.mark.e2e

SECRET = "otel-configured-secret-4711"  # a configured secret (KIMI_MCP_HTTP_TOKEN) without a key's shape


def otel_env(env: dict[str, str], otlp: OtlpReceiver, **more: str) -> dict[str, str]:
    """``env`` exporting to ``otlp``, quickly (spans every 100 ms, metrics every 200 ms)."""
    return {
        **env, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "200", **more,
    }  # fmt: skip


def child(otlp: OtlpReceiver, parent: Span, name: str) -> Span:
    (found,) = [s for s in otlp.named(name) if s.parent_id == parent.span_id]
    assert found.trace_id == parent.trace_id
    return found


async def call(client: Client, tool: str, args: dict) -> dict:
    return (await client.call_tool(tool, args, raise_on_error=False)).structured_content


def test_a_local_job_is_one_trace_from_tools_call_to_kimi_apply(
    kimi: KimiUnderTest, fake: FakeMoonshot, tmp_path: Path
) -> None:
    """One Kimi launch: a worktree job whose approvals are asked of the caller, verified, then applied. The
    trace holds FastMCP's ``tools/call``, the ``invoke_agent kimi`` span under it (GenAI attributes), Kimi's
    start, its turn with its steps and tool calls, the approvals, the change list, the verify round and
    ``kimi_apply``; the metrics count the job and its tokens; the configured secret in the task never leaves."""
    repo = committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    steps = [Reply.tool(*kimi.shell("echo hi > shell.txt")), Reply.tool(*kimi.write("new.txt", "N\n"))]
    fake.script([*steps, Reply.text_reply("otel done")], marker="OTEL-LOCAL")
    with OtlpReceiver() as otlp:
        env = otel_env(kimi.env, otlp, KIMI_MCP_OTEL_CONTENT="true", KIMI_MCP_HTTP_TOKEN=SECRET)

        async def body(client: Client):
            args = {
                "task_description": f"OTEL-LOCAL go; the token is {SECRET}", "work_dir": str(repo),
                "isolation": "worktree", "verify_command": "test -f new.txt", "approvals": "ask",
            }  # fmt: skip
            result = await call(client, "kimi_code_task", args)
            asked = 0
            while result["status"] == "waiting":
                asked += 1
                answer = {"job_id": result["job_id"], "action": "answer", "answer": "approve", "wait_s": 120}
                result = await call(client, "kimi_job", answer)
            return result, asked, await call(client, "kimi_apply", {"job_id": result["job_id"]})

        async def main():
            async with Client(transport(env, repo, tmp_path / "server.log"), timeout=600) as client:
                return await body(client)

        done, asked, applied = asyncio.run(main())
        assert done["status"] == "done" and done["verify"]["passed"] is True, done
        assert asked >= 1 and applied["success"] is True, (asked, applied)
        otlp.wait_for(
            lambda o: o.named("kimi_apply") and o.named("invoke_agent kimi") and "kimi_mcp.jobs" in o.metrics
        )
        (job,) = otlp.named("invoke_agent kimi")
        (call_span,) = [s for s in otlp.spans if s.span_id == job.parent_id]
        assert call_span.name == "tools/call kimi_code_task" and call_span.trace_id == job.trace_id
        attrs = job.attributes
        assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["gen_ai.agent.name"] == "kimi"
        assert attrs["kimi_mcp.job_id"] == done["job_id"] and attrs["kimi_mcp.tool"] == "kimi_code_task"
        assert (attrs["kimi_mcp.dialect"], attrs["kimi_mcp.status"]) == (kimi.name, "done")
        assert attrs["gen_ai.conversation.id"] == done["session_id"] and attrs["kimi_mcp.files_changed"] == 2
        assert attrs["gen_ai.request.model"] == done["model"] and "error.type" not in attrs
        assert attrs["gen_ai.usage.input_tokens"] == done["usage"]["input_tokens"] > 0
        assert attrs["gen_ai.usage.output_tokens"] == done["usage"]["output_tokens"] > 0
        assert "OTEL-LOCAL go" in attrs["gen_ai.input.messages"]  # KIMI_MCP_OTEL_CONTENT=true
        assert json.loads(attrs["gen_ai.output.messages"])[0]["parts"][0]["content"] == "otel done"
        start, turn = child(otlp, job, "kimi.start"), child(otlp, job, "kimi.turn")
        assert start.attributes == {} and turn.attributes["gen_ai.usage.input_tokens"] > 0
        assert [e for e, _ in turn.events].count("kimi.step") == turn.attributes["kimi_mcp.steps"] >= 3
        calls = [a for e, a in turn.events if e == "kimi.tool_call"]
        assert len(calls) == 2 and calls[0]["kimi_mcp.approval"] == "approved", calls  # the shell command
        approvals = [s for s in otlp.named("kimi.approval") if s.parent_id == turn.span_id]
        assert len(approvals) == asked and {s.attributes["kimi_mcp.question.outcome"] for s in approvals} == {
            "answered"
        }
        child(otlp, job, "kimi_mcp.diff")
        child(otlp, job, "kimi_mcp.verify")
        (apply_span,) = otlp.named("kimi_apply")
        (apply_call,) = [s for s in otlp.spans if s.span_id == apply_span.parent_id]
        assert (
            apply_call.name == "tools/call kimi_apply"
            and apply_span.attributes["kimi_mcp.job_id"] == done["job_id"]
        )
        jobs = otlp.metrics["kimi_mcp.jobs"]
        assert {"kimi_mcp.tool": "kimi_code_task", "kimi_mcp.status": "done"} in [
            p["attributes"] for p in jobs
        ]
        otlp.wait_for(lambda o: {"gen_ai.client.token.usage", "kimi_mcp.job.duration", "kimi_mcp.jobs.waiting"}
                      <= set(o.metrics))  # fmt: skip
        kinds = {p["attributes"]["gen_ai.token.type"] for p in otlp.metrics["gen_ai.client.token.usage"]}
        assert kinds == {"input", "output"}
        assert otlp.metrics["kimi_mcp.jobs.waiting"][-1]["value"] == 0  # asked, then answered
        leaks = [(s.name, k) for s in otlp.spans for k, v in s.attributes.items() if SECRET in str(v)]
        assert not leaks, leaks
        assert SECRET not in otlp.strings() and "token is ***" in attrs["gen_ai.input.messages"]
        assert set(otlp.paths) == {"/v1/traces", "/v1/metrics"}
