"""``kimi-mcp jobs`` on a real job store: the table a person reads (a waiting job's question, tokens, age,
~ for home, cut to the terminal's width), ``--json``, the filters, a missing or unreadable store."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimi_mcp import cli, jobs_cli
from kimi_mcp.jobs import STORE_FILE, JobRecord, JobStore, owner_id
from kimi_mcp.jobs._store import STATUSES

DEAD = "dead-owner"  # malformed, so never alive
HOUR = 3600.0


@dataclass
class World:
    home: Path
    state: Path
    workspace: Path

    @property
    def path(self) -> Path:
        return self.state / STORE_FILE

    def store(self) -> JobStore:
        return JobStore(self.path)

    def job(
        self, *, owner: str | None = None, workspace: Path | None = None, age_s: float = 0.0
    ) -> JobRecord:
        """A running job (of this live process unless ``owner``) that started ``age_s`` ago."""
        store = self.store()
        try:
            record = store.create(
                tool="kimi_code_task", workspace=str(workspace or self.workspace), read_only=False,
                arguments={}, owner=owner or owner_id(), status="running",
            )  # fmt: skip
        finally:
            store.close()
        if age_s:
            with sqlite3.connect(self.path) as conn:
                conn.execute(
                    "UPDATE jobs SET started_at = ? WHERE job_id = ?", (time.time() - age_s, record.job_id)
                )
            conn.close()
        return record

    def update(self, job_id: str, **fields: object) -> None:
        store = self.store()
        try:
            store.update(job_id, **fields)  # type: ignore[arg-type]
        finally:
            store.close()

    def finish(self, job_id: str, summary: str, *, tokens: tuple[int, int] = (0, 0)) -> None:
        store = self.store()
        try:
            usage = {"input_tokens": tokens[0], "output_tokens": tokens[1]}
            store.finish(job_id, status="done", result={"success": True, "usage": usage}, summary=summary)
        finally:
            store.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    home = tmp_path / "home"
    workspace = home / "projects" / "app"
    workspace.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "empty.env").write_text("")
    monkeypatch.setenv("KIMI_MCP_ENV_FILE", str(tmp_path / "empty.env"))  # not the checkout's .env
    monkeypatch.setenv("KIMI_MCP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KIMI_MCP_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return World(home=home, state=tmp_path / "state", workspace=workspace)


def kimi_mcp(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit:
        cli.main(list(argv))
    return int(exit.value.code or 0)


# -- kimi-mcp jobs ------------------------------------------------------------------------------------------


def three_jobs(world: World) -> tuple[JobRecord, JobRecord, JobRecord]:
    """A job done 5 days ago (1.5k tokens), one waiting on a question (2 hours), one whose server died."""
    done = world.job(age_s=5 * 24 * HOUR + 60)
    world.finish(done.job_id, "Fixed the off-by-one in parse()", tokens=(1200, 300))
    waiting = world.job(age_s=2 * HOUR + 60)
    question = {"kind": "question", "text": "Overwrite\napp.py?\x1b[2J", "options": []}
    world.update(waiting.job_id, status="waiting", question=question, tokens=950, summary="editing")
    orphan = world.job(owner=DEAD, workspace=world.home / "elsewhere")
    return done, waiting, orphan


def test_the_table_shows_each_job_for_a_person(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    done, waiting, orphan = three_jobs(world)
    assert kimi_mcp("jobs") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOB", "STATUS", "TOOL", "WORKSPACE", "TOKENS", "AGE", "SUMMARY"]
    by_id = {line.split()[0]: line for line in lines[1:]}
    assert list(by_id) == [orphan.job_id, waiting.job_id, done.job_id]  # newest first
    assert by_id[done.job_id].split() == [
        done.job_id, "done", "code_task", "~/projects/app", "1.5k", "5d", "Fixed", "the", "off-by-one",
        "in", "parse()",
    ]  # fmt: skip
    assert by_id[waiting.job_id].split()[1:6] == ["waiting", "code_task", "~/projects/app", "950", "2h"]
    assert by_id[waiting.job_id].endswith("  ? Overwrite app.py?")  # the question, not the summary
    assert by_id[orphan.job_id].split()[1:6] == ["interrupted", "code_task", "~/elsewhere", "0", "0s"]
    assert "\x1b" not in "".join(lines)


def test_a_long_summary_is_cut_to_the_terminals_width(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = world.job(workspace=Path("/srv/" + "deep/" * 20 + "repo"))
    world.finish(job.job_id, "word " * 100)
    monkeypatch.setenv("COLUMNS", "100")
    assert kimi_mcp("jobs") == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    assert lines[1].endswith(" w…") and len(lines[1]) == 100 and f"  …{job.workspace[-31:]}  " in lines[1]


def test_json_is_one_list_of_the_jobs(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    done, waiting, orphan = three_jobs(world)
    assert kimi_mcp("jobs", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [job["job_id"] for job in listed] == [orphan.job_id, waiting.job_id, done.job_id]
    assert listed[1]["status"] == "waiting" and listed[1]["question"]["text"] == "Overwrite\napp.py?\x1b[2J"
    assert listed[1]["tokens"] == 950 and listed[2]["tokens"] == 1500 and listed[0]["status"] == "interrupted"
    assert listed[2]["workspace"] == str(world.workspace) and listed[2]["finished_at"].endswith("+00:00")
    assert set(listed[0]) >= {"tool", "started_at", "duration_s", "model", "session_id", "summary"}


def test_the_filters_choose_the_jobs(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    done, waiting, orphan = three_jobs(world)
    assert kimi_mcp("jobs", "--status", "waiting", "--json") == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == [waiting.job_id]
    assert kimi_mcp("jobs", "--workspace", str(world.home / "elsewhere"), "--json") == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == [orphan.job_id]
    assert kimi_mcp("jobs", "--limit", "1", "--json") == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == [orphan.job_id]
    assert kimi_mcp("jobs", "--status", "queued") == 0
    assert capsys.readouterr().out.startswith("no jobs with status queued (store ")
    assert kimi_mcp("jobs", "--status", "finished") == 2
    assert "invalid choice: 'finished'" in capsys.readouterr().err
    assert kimi_mcp("jobs", "--limit", "0") == 2
    assert set(jobs_cli.STATUSES) == STATUSES


def test_no_store_yet_is_no_jobs_and_creates_none(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert kimi_mcp("jobs") == 0
    assert capsys.readouterr().out == f"no jobs yet (store {world.path})\n"
    assert kimi_mcp("jobs", "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not world.path.exists()


def test_a_store_that_cannot_be_opened_is_a_one_line_error(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.state.mkdir()
    world.path.write_bytes(b"this is not a database, " * 100)
    assert kimi_mcp("jobs") == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"kimi-mcp jobs: error: cannot open the job store {world.path}: ")


def test_the_commands_are_registered_in_the_real_entry_point(world: World, tmp_path: Path) -> None:
    job = world.job()
    env = {
        "PATH": os.environ["PATH"], "HOME": str(world.home), "KIMI_MCP_STATE_DIR": str(world.state),
        "KIMI_MCP_ENV_FILE": str(tmp_path / "empty.env"),
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "kimi_mcp.cli", "jobs", "--json"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [listed["job_id"] for listed in json.loads(done.stdout)] == [job.job_id]
