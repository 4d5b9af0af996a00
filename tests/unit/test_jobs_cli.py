"""``kimi-mcp jobs`` and ``kimi-mcp watch`` on a real job store: the table a person reads (a waiting job's
question, tokens, age, ~ for home, cut to the terminal's width), ``--json``, the filters, a missing or
unreadable store; a watched job's screens each drawn once then its end, Ctrl-C, an unknown or finished job,
a dead server, and nothing from the screen reaching the terminal but text."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimi_mcp import cli
from kimi_mcp.job_text import STATUSES as SHOWN_STATUSES
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


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


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
    assert set(SHOWN_STATUSES) == STATUSES  # the names --status and the dashboard offer are the store's


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
    for command in (["jobs"], ["watch", "job_0000000000000000"]):
        assert kimi_mcp(*command) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith(
            f"kimi-mcp {command[0]}: error: cannot open the job store {world.path}: "
        )


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
    done = subprocess.run(
        [sys.executable, "-m", "kimi_mcp.cli", "watch", "job_nope"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no job job_nope" in done.stderr


# -- kimi-mcp watch -----------------------------------------------------------------------------------------


def test_watch_draws_each_screen_once_until_the_job_ends(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    job = world.job()

    def server() -> None:  # what the job's owner publishes, in its own connection
        time.sleep(0.3)
        world.update(job.job_id, screen="Kimi is reading app.py\n")
        time.sleep(0.3)
        world.update(job.job_id, screen="Kimi is editing app.py\n", tokens=40)  # same screen: no frame
        time.sleep(0.3)
        world.update(job.job_id, screen="Kimi wrote app.py\n")
        time.sleep(0.3)
        world.finish(job.job_id, "Rewrote app.py")

    publisher = threading.Thread(target=server)
    publisher.start()
    try:
        assert kimi_mcp("watch", job.job_id, "--interval", "0.02") == 0
    finally:
        publisher.join()
    out = capsys.readouterr().out
    for screen in ("Kimi is reading app.py", "Kimi is editing app.py", "Kimi wrote app.py"):
        assert out.count(screen) == 1, out
    assert out.count(f"── {job.job_id}  running  ") == 4, out  # (no screen yet), then the three screens
    assert out.index("reading") < out.index("editing") < out.index("wrote") < out.index("done after")
    assert out.endswith(f"{job.job_id} done after 1s\nRewrote app.py\n"), out
    assert "\x1b" not in out  # not a terminal: no clearing


def test_watch_shows_a_waiting_jobs_question(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    job = world.job()
    world.update(job.job_id, status="waiting", question={"text": "Delete\nbuild/?"}, screen="? Delete build/")
    threading.Timer(0.3, world.finish, (job.job_id, "Asked and done")).start()
    assert kimi_mcp("watch", job.job_id, "--interval", "0.02") == 0
    out = capsys.readouterr().out
    assert f"── {job.job_id}  waiting  0s ──\n? Delete build/?\n? Delete build/\n" in out


def test_the_screen_reaches_the_terminal_as_text_only(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    job = world.job(age_s=125)
    evil = "red \x1b[31mALERT\x1b[0m\x07 \x1b]0;pwned\x07title\r\nline 2\x00\x9b2J\tend  \n\n"
    world.update(job.job_id, screen=evil)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(time, "sleep", _interrupt)  # Ctrl-C after the first frame
    assert kimi_mcp("watch", job.job_id) == 0
    out = terminal.getvalue()
    assert out == f"\x1b[H\x1b[2J── {job.job_id}  running  2m05s ──\nred ALERT title\nline 22J    end\n\n"
    assert world.store().screen(job.job_id) == ("running", evil)  # left as it was


def _interrupt(_seconds: float) -> None:
    raise KeyboardInterrupt


def test_watch_of_an_unknown_job_exits_2(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert kimi_mcp("watch", "job_0123456789abcdef") == 2  # no store yet
    assert "no job job_0123456789abcdef: there is no job store at" in capsys.readouterr().err
    world.job()
    assert kimi_mcp("watch", "job_0123456789abcdef") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == f"kimi-mcp watch: error: no job job_0123456789abcdef in the job store {world.path}\n"
    )


def test_watch_of_a_finished_job_says_so(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    job = world.job(age_s=90)
    world.finish(job.job_id, "All tests pass")
    assert kimi_mcp("watch", job.job_id) == 0
    assert (
        capsys.readouterr().out
        == f"{job.job_id} finished already: done 0s ago, after 1m30s\nAll tests pass\n"
    )


def test_watch_of_a_job_whose_server_died_writes_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    job = world.job(owner=DEAD)
    assert kimi_mcp("watch", job.job_id, "--interval", "0.02") == 0
    assert capsys.readouterr().out == f"{job.job_id} interrupted: the kimi-mcp server running it stopped\n"
    store = world.store()
    assert store.screen(job.job_id) == ("running", None)  # recorded as interrupted by a server, not here
    store.close()
