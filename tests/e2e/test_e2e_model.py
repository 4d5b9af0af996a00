"""The model per call, end to end (real client → real server → real Kimi, both dialects), with a Kimi whose
config file offers two models: ``model`` picks one with Kimi's own ``-m`` (the fake API sees which), an
alias or the provider's model name both work, ``KIMI_MCP_MODEL`` is the default, a follow-up keeps its
conversation's model unless it names another, and an unknown model is a ``bad_input`` listing Kimi's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_moonshot import FakeMoonshot, Reply
from fastmcp import Client
from kimi_env import FAKE_KEY, KimiUnderTest
from mcp_helpers import processes_with_home, with_client

pytestmark = pytest.mark.e2e

MODELS = {"legacy": ("one", "two"), "kimi-code": ("fake/one", "fake/two")}


@pytest.fixture
def two_models(kimi: KimiUnderTest, fake: FakeMoonshot) -> KimiUnderTest:
    """``kimi`` configured by its config file (not the environment) with the models one and two."""
    env = {
        k: v for k, v in kimi.env.items() if not k.startswith(("KIMI_MODEL_", "KIMI_API_KEY", "KIMI_BASE"))
    }
    one, two = MODELS[kimi.name]
    config = kimi.home / (".kimi" if kimi.name == "legacy" else ".kimi-code") / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    extra = 'capabilities = ["tool_use"]\n' if kimi.name == "kimi-code" else ""
    config.write_text(
        f'default_model = "{one}"\n'
        f'[providers.fake]\ntype = "kimi"\nbase_url = "{fake.base_url}"\napi_key = "{FAKE_KEY}"\n'
        + "".join(
            f'[models."{alias}"]\nprovider = "fake"\nmodel = "kimi-k2-{alias.rsplit("/", 1)[-1]}"\n'
            f"max_context_size = 200000\n{extra}"
            for alias in (one, two)
        )
    )
    return KimiUnderTest(kimi.name, env, kimi.home)


def run(kimi: KimiUnderTest, workspace: Path, log: Path, body, **env: str):
    return asyncio.run(with_client({**kimi.env, **env}, workspace, log, body))


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args, raise_on_error=False)
    return result.structured_content


def models_asked(fake: FakeMoonshot) -> list[str]:
    return [request["body"]["model"] for request in fake.chat_requests()]


def test_model_picks_kimis_model_by_alias_or_name_and_a_standby_of_another_is_not_used(
    two_models: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    one, two = MODELS[two_models.name]
    two_models.env["KIMI_MCP_STANDBY"] = (
        "after-call"  # the product's default (the tests' is off): its subject
    )
    fake.script([Reply.text_reply("A1"), Reply.text_reply("A2"), Reply.text_reply("A3")])

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "first", "model": "two"})
        second = await call(client, "kimi_code_task", {"task_description": "second", "model": "kimi-k2-one"})
        third = await call(client, "kimi_code_task", {"task_description": "third"})
        return first, second, third

    first, second, third = run(two_models, workspace, tmp_path / "server.log", body)
    assert [r["output"] for r in (first, second, third)] == ["A1", "A2", "A3"]
    # a call naming no model says which one ran: Kimi's default (one)
    assert [r["model"] for r in (first, second, third)] == [two, one, one]
    assert models_asked(fake) == ["kimi-k2-two", "kimi-k2-one", "kimi-k2-one"]  # the third: Kimi's default
    assert second["warm_start"] is False  # the standby started for model two was not used for one
    assert third["warm_start"] is True  # naming Kimi's default or no model is the same Kimi: one standby
    assert not processes_with_home(two_models.home)


def test_kimi_mcp_model_is_the_default_and_a_follow_up_keeps_or_changes_it(
    two_models: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    one, two = MODELS[two_models.name]
    fake.script(
        [
            Reply.text_reply("FIRST-ANSWER"),
            Reply.text_reply("SAME-MODEL", requires="FIRST-ANSWER"),
            Reply.text_reply("OTHER-MODEL", requires="SAME-MODEL"),
        ]
    )

    async def body(client: Client):
        first = await call(client, "kimi_code_task", {"task_description": "start"})
        sid = first["session_id"]
        same = await call(client, "kimi_continue", {"session_id": sid, "message": "again"})
        other = await call(client, "kimi_continue", {"session_id": sid, "message": "more", "model": one})
        return first, same, other

    first, same, other = run(two_models, workspace, tmp_path / "server.log", body, KIMI_MCP_MODEL="two")
    assert [first["output"], same["output"], other["output"]] == ["FIRST-ANSWER", "SAME-MODEL", "OTHER-MODEL"]
    assert [first["model"], same["model"], other["model"]] == [two, two, one]
    assert models_asked(fake) == ["kimi-k2-two", "kimi-k2-two", "kimi-k2-one"]
    assert not processes_with_home(two_models.home)


def test_an_unknown_model_is_bad_input_listing_kimis_models(
    two_models: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    one, two = MODELS[two_models.name]

    async def body(client: Client):
        unknown = await client.call_tool(
            "kimi_code_task", {"task_description": "x", "model": "kimi-k9"}, raise_on_error=False
        )
        keys = await client.call_tool(
            "kimi_code_task", {"task_description": "x", "model": "two\r/yolo"}, raise_on_error=False
        )
        status = await call(client, "kimi_status", {})
        return unknown, keys, status

    unknown, keys, status = run(two_models, workspace, tmp_path / "server.log", body)
    error = unknown.structured_content["error"]
    assert unknown.is_error and error["type"] == "bad_input"
    assert f"{one} (kimi-k2-one), {two} (kimi-k2-two)" in error["message"] and "'kimi-k9'" in error["message"]
    assert "kimi-k9" in unknown.content[0].text and "kimi_status" not in error["message"]
    assert keys.is_error and "pattern" in keys.content[0].text  # control bytes never reach Kimi
    assert status["models"] == [one, two] and status["default_model"] == one  # Kimi's own default
    assert fake.chat_requests() == [] and not processes_with_home(two_models.home)


#: an OpenAI-compatible endpoint in Kimi's config file: the provider type each dialect calls it by
OPENAI_TYPE = {"legacy": "openai_legacy", "kimi-code": "openai"}


def test_an_openai_compatible_endpoint_in_kimis_config_is_used_without_any_login(
    kimi: KimiUnderTest, fake: FakeMoonshot, workspace: Path, tmp_path: Path
):
    """The README's "Log in without the Moonshot service": a provider with its own ``base_url`` and key."""
    env = {
        k: v for k, v in kimi.env.items() if not k.startswith(("KIMI_MODEL_", "KIMI_API_KEY", "KIMI_BASE"))
    }
    alias = "local-llm" if kimi.name == "legacy" else "local/my-llm"
    config = kimi.home / (".kimi" if kimi.name == "legacy" else ".kimi-code") / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'default_model = "{alias}"\n'
        f'[providers.local]\ntype = "{OPENAI_TYPE[kimi.name]}"\nbase_url = "{fake.base_url}"\n'
        f'api_key = "{FAKE_KEY}"\n'
        f'[models."{alias}"]\nprovider = "local"\nmodel = "my-llm"\nmax_context_size = 131072\n'
        + ('capabilities = ["tool_use"]\n' if kimi.name == "kimi-code" else "")
    )
    fake.script([Reply.tool(*kimi.write("hello.txt", "hi\n")), Reply.text_reply("WROTE-IT")])

    async def body(client: Client):
        return await call(client, "kimi_code_task", {"task_description": "write hello.txt"})

    result = run(KimiUnderTest(kimi.name, env, kimi.home), workspace, tmp_path / "server.log", body)
    assert result["success"] and result["output"] == "WROTE-IT" and result["model"] == alias
    assert result["files_created"] == ["hello.txt"] and (workspace / "hello.txt").read_text() == "hi\n"
    chats = fake.chat_requests()
    assert models_asked(fake) == ["my-llm", "my-llm"]
    assert all(r["headers"]["authorization"] == f"Bearer {FAKE_KEY}" for r in chats)
    assert not processes_with_home(kimi.home)
