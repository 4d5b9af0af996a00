"""Kimi's files of one conversation moved to another machine (``remote.sessions``): laid out as each
dialect's real home lays them out (seen in the e2e runs: kimi-cli 1.50.0, Kimi Code 2.1.0), packed on
one worker and placed on another for a work directory at another path."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from kimi_mcp.drivers.kimi_code import KimiCodeDriver
from kimi_mcp.drivers.legacy import LegacyDriver
from kimi_mcp.errors import SessionError
from kimi_mcp.remote.sessions import pack, place

LEGACY_SID = "4271228e-0f11-43f7-9d0f-90a49d80bd61"
CODE_SID = "session_86713137-dc23-4506-b791-384daff9074e"


def dirs(tmp_path: Path) -> tuple[dict[str, str], dict[str, str], Path, Path]:
    """(first worker's env, second's, the copy's work dir on each)."""
    old, new = tmp_path / "w1" / "checkouts" / "job_1" / "tree", tmp_path / "w2" / "state" / "job_1" / "tree"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    return {"HOME": str(tmp_path / "h1")}, {"HOME": str(tmp_path / "h2")}, old, new


def test_the_legacy_dialect_finds_a_moved_conversation_under_the_new_work_dir(tmp_path: Path) -> None:
    env1, env2, old, new = dirs(tmp_path)
    folder = LegacyDriver.sessions_root(env1) / LegacyDriver.store_key(str(old)) / LEGACY_SID
    folder.mkdir(parents=True)
    (folder / "context.jsonl").write_text(json.dumps({"role": "system", "content": f"cwd is {old}"}) + "\n")
    (folder / "wire.jsonl").write_text(json.dumps({"type": "TurnEnd"}) + "\n")
    (folder / "state.json").write_text("{}")
    meta2 = LegacyDriver.sessions_root(env2).parent / "kimi.json"
    meta2.parent.mkdir(parents=True)
    meta2.write_text(json.dumps({"work_dirs": [{"path": "/other", "kaos": "local", "last_session_id": "x"}]}))

    data = pack(LegacyDriver, env1, LEGACY_SID, old)
    assert data is not None
    assert place(LegacyDriver, env2, data, new) == LEGACY_SID

    moved = LegacyDriver.sessions_root(env2) / LegacyDriver.store_key(str(new)) / LEGACY_SID
    context = (moved / "context.jsonl").read_text()
    assert str(new) in context and str(old) not in context
    assert (moved / "wire.jsonl").read_text() == (folder / "wire.jsonl").read_text()
    listed = json.loads(meta2.read_text())["work_dirs"]
    assert {"path": "/other", "kaos": "local", "last_session_id": "x"} in listed  # others' entries stay
    assert {"path": str(new), "kaos": "local", "last_session_id": LEGACY_SID} in listed
    assert LegacyDriver(None).wire_log(env2, new, LEGACY_SID) == moved / "wire.jsonl"  # type: ignore[arg-type]


def test_kimi_code_gets_its_cwd_home_and_workspace_key_rewritten_and_indexed(tmp_path: Path) -> None:
    env1, env2, old, new = dirs(tmp_path)
    old_key, new_key = KimiCodeDriver.store_key(str(old)), KimiCodeDriver.store_key(str(new))
    assert old_key.startswith("wd_tree_") and new_key != old_key
    folder = KimiCodeDriver.sessions_root(env1) / old_key / CODE_SID
    (folder / "agents" / "main").mkdir(parents=True)
    state = {
        "id": CODE_SID,
        "cwd": str(old),
        "agents": {"main": {"homedir": str(folder / "agents" / "main")}},
    }
    (folder / "state.json").write_text(json.dumps(state))
    binding = {"type": "runtime.set_binding", "workspaceId": old_key, "runtimeId": "local"}
    (folder / "agents" / "main" / "wire.jsonl").write_text(json.dumps(binding) + "\n")
    (folder / "agents" / "main" / "blob").write_bytes(str(old).encode())  # not JSON: left as it is

    data = pack(KimiCodeDriver, env1, CODE_SID, old)
    assert data is not None
    place(KimiCodeDriver, env2, data, new)

    home = KimiCodeDriver.sessions_root(env2).parent
    moved = home / "sessions" / new_key / CODE_SID
    assert json.loads((moved / "state.json").read_text()) == {
        "id": CODE_SID, "cwd": str(new), "agents": {"main": {"homedir": str(moved / "agents" / "main")}},
    }  # fmt: skip
    assert json.loads((moved / "agents" / "main" / "wire.jsonl").read_text())["workspaceId"] == new_key
    assert (moved / "agents" / "main" / "blob").read_bytes() == str(old).encode()
    index = [json.loads(line) for line in (home / "session_index.jsonl").read_text().splitlines()]
    assert index == [{"sessionId": CODE_SID, "sessionDir": str(moved), "workDir": str(new)}]
    workspace = json.loads((home / "workspaces.json").read_text())["workspaces"][new_key]
    assert workspace["root"] == str(new) and workspace["name"] == "tree"


def test_a_conversation_placed_again_replaces_the_older_copy_of_it(tmp_path: Path) -> None:
    env1, env2, old, new = dirs(tmp_path)
    folder = LegacyDriver.sessions_root(env1) / LegacyDriver.store_key(str(old)) / LEGACY_SID
    folder.mkdir(parents=True)
    (folder / "context.jsonl").write_text('{"turn": 1}\n')
    place(LegacyDriver, env2, pack(LegacyDriver, env1, LEGACY_SID, old) or b"", new)
    (folder / "context.jsonl").write_text('{"turn": 2}\n')
    (folder / "wire.jsonl").write_text("{}\n")
    place(LegacyDriver, env2, pack(LegacyDriver, env1, LEGACY_SID, old) or b"", new)
    moved = LegacyDriver.sessions_root(env2) / LegacyDriver.store_key(str(new)) / LEGACY_SID
    assert (moved / "context.jsonl").read_text() == '{"turn": 2}\n' and (moved / "wire.jsonl").is_file()
    assert [p.name for p in moved.parent.iterdir()] == [LEGACY_SID]  # no staging folder left


def test_no_conversation_packs_to_none_and_another_dialect_cannot_take_one(tmp_path: Path) -> None:
    env1, env2, old, new = dirs(tmp_path)
    assert pack(LegacyDriver, env1, LEGACY_SID, old) is None
    folder = LegacyDriver.sessions_root(env1) / LegacyDriver.store_key(str(old)) / LEGACY_SID
    folder.mkdir(parents=True)
    data = pack(LegacyDriver, env1, LEGACY_SID, old)
    assert data is not None
    with pytest.raises(SessionError, match="running legacy; this worker runs kimi-code"):
        place(KimiCodeDriver, env2, data, new)
    assert not KimiCodeDriver.sessions_root(env2).exists()


def tar_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return out.getvalue()


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ({"session/x.json": b"{}"}, "manifest"),
        (
            {"kimi-mcp-session.json": json.dumps({"dialect": "legacy", "session_id": "../x"}).encode()},
            "valid",
        ),
        (
            {
                "kimi-mcp-session.json": json.dumps(
                    {"dialect": "legacy", "session_id": "s1", "workdir": "/a", "folder": "/h/sessions/k/s1"}
                ).encode(),
                "session/../../../../escaped.txt": b"out",
            },
            "could not be put",
        ),
        ({"not": b"a tar"}, "could not be put"),
    ],
)
def test_bad_conversation_files_are_a_clear_error_and_nothing_lands_outside(
    tmp_path: Path, members: dict[str, bytes], error: str
) -> None:
    env = {"HOME": str(tmp_path / "home")}
    data = b"not gzip at all" if "not" in members else tar_of(members)
    with pytest.raises(SessionError, match=error):
        place(LegacyDriver, env, data, tmp_path / "wd")
    assert not list(tmp_path.rglob("escaped.txt"))
