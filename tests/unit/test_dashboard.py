"""The dashboard's pieces (no browser, no Kimi): the token gate (bearer header, the cookie ``?token=`` sets,
loopback without a token), the CSRF check of every POST, the masks on what a page shows, the answer
button's path through the job store, the usage numbers. The ASGI app is called directly."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from kimi_mcp import config
from kimi_mcp.dashboard import Source, create_app
from kimi_mcp.dashboard._usage import usage_data
from kimi_mcp.dashboard._workers import WorkerRow, Workers, workers_view
from kimi_mcp.http_token import required_token
from kimi_mcp.jobs import STORE_FILE, JobStore

TOKEN = "t0ken-of-the-dashboard-xyz"
CSRF = "the-csrf-token-of-this-process"
SECRET = "moonshot-secret-value-42"
KEY = "sk-abcdefghijklmnopqrstuv"


def request(
    app, method: str, path: str, *, headers: dict | None = None, body: bytes = b"", host="127.0.0.1:8765"
):
    """One request through the ASGI app: (status, headers, body) of its (non-streaming) response."""
    path, _, query = path.partition("?")
    sent = [(b"host", host.encode()), *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]
    if body:
        sent.append((b"content-type", b"application/x-www-form-urlencoded"))
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "headers": sent, "scheme": "http", "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 5000), "http_version": "1.1", "asgi": {"version": "3.0"},
    }  # fmt: skip
    messages: list[dict] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        messages.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in messages if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], [(k.decode(), v.decode()) for k, v in start["headers"]], out.decode()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "KIMI_API_KEY": SECRET}


@pytest.fixture
def source(env: dict[str, str]) -> Source:
    settings, problem = config.configured(env)
    assert problem is None
    made = Source(settings, env)
    yield made
    made.close()


@pytest.fixture
def store(env: dict[str, str], source: Source) -> JobStore:
    return JobStore(Path(env["XDG_STATE_HOME"]) / "kimi-mcp" / STORE_FILE)


def waiting_job(store: JobStore) -> str:
    """A waiting job of a live owner (this process) with a question, a secret in its summary and screen."""
    from kimi_mcp.jobs import owner_id

    record = store.create(
        tool="kimi_code_task", workspace="/w", read_only=False, arguments={}, owner=owner_id(),
        status="running", summary=f"uses {SECRET} and {KEY}",
    )  # fmt: skip
    question = {
        "id": "q1", "kind": "question", "text": f"Which colour? ({SECRET})", "header": "Colour",
        "options": [{"label": "Red"}, {"label": "Blue"}], "multi_select": False, "free_text": True,
    }  # fmt: skip
    store.update(record.job_id, status="waiting", question=question, screen=f"screen shows {KEY}\n> ")
    return record.job_id


# -- the gate ---------------------------------------------------------------------------------------------
def test_a_token_is_required_on_every_path_as_a_bearer_header_or_the_cookie_token_sets(
    source: Source,
) -> None:
    app = create_app(source, token=TOKEN, csrf=CSRF)
    for path in ("/", "/usage", "/events/jobs", "/events/job/job_1", "/static/dashboard.js", "/job/job_1"):
        status, headers, _ = request(app, "GET", path, host="example.org")
        assert status == 401, path
        assert ("www-authenticate", "Bearer") in headers
    assert request(app, "GET", "/", headers={"Authorization": "Bearer wrong-token-of-16"})[0] == 401
    assert request(app, "GET", "/?token=wrong-token-of-16")[0] == 401
    assert (
        request(app, "GET", "/", headers={"Authorization": f"Bearer {TOKEN}"}, host="example.org")[0] == 200
    )

    status, headers, _ = request(app, "GET", f"/usage?token={TOKEN}&x=1", host="example.org")
    assert status == 303 and ("location", "/usage?x=1") in headers  # the token leaves the address
    cookie = next(v for k, v in headers if k == "set-cookie")
    assert (
        cookie.startswith(f"kimi_mcp_dashboard={TOKEN};")
        and "HttpOnly" in cookie
        and "SameSite=strict" in cookie
    )
    status, _, page = request(app, "GET", "/usage", headers={"Cookie": f"kimi_mcp_dashboard={TOKEN}"})
    assert status == 200 and "<h1>Usage</h1>" in page


def test_without_a_token_only_a_loopback_host_is_served(source: Source) -> None:
    app = create_app(source, token=None, csrf=CSRF)
    assert request(app, "GET", "/", host="127.0.0.1:8765")[0] == 200
    assert request(app, "GET", "/", host="localhost:8765")[0] == 200
    assert request(app, "GET", "/", host="[::1]:8765")[0] == 200
    assert request(app, "GET", "/", host="attacker.example:8765")[0] == 403  # a rebound name reaches nothing


def test_off_loopback_the_dashboard_needs_the_http_token_as_the_transport_does() -> None:
    with pytest.raises(config.ConfigError, match="KIMI_MCP_HTTP_TOKEN"):
        required_token("0.0.0.0", None)
    with pytest.raises(config.ConfigError, match="too short"):
        required_token("0.0.0.0", "short")
    assert required_token("127.0.0.1", None) is None
    assert required_token("0.0.0.0", TOKEN) == TOKEN


def test_every_page_says_no_cache_no_frames_and_scripts_from_itself_only(source: Source) -> None:
    _, headers, _ = request(create_app(source, token=None, csrf=CSRF), "GET", "/")
    said = dict(headers)
    assert said["cache-control"] == "no-store" and said["x-frame-options"] == "DENY"
    assert "script-src 'self'" in said["content-security-policy"]


# -- CSRF -------------------------------------------------------------------------------------------------
def test_a_post_without_the_pages_csrf_token_is_refused_and_changes_nothing(
    source: Source, store: JobStore
) -> None:
    job_id = waiting_job(store)
    app = create_app(source, token=None, csrf=CSRF)
    form = {"answer": "Blue", "question_id": "q1"}
    assert request(app, "POST", f"/job/{job_id}/answer", body=urlencode(form).encode())[0] == 403
    bad = urlencode({**form, "csrf": "not-it"}).encode()
    assert request(app, "POST", f"/job/{job_id}/answer", body=bad)[0] == 403
    assert request(app, "POST", f"/job/{job_id}/cancel", body=b"")[0] == 403
    assert store.take_sent(job_id) == [] and not store.cancel_requested(job_id)
    assert request(app, "GET", f"/job/{job_id}/cancel")[0] == 405  # a GET changes nothing either


def test_an_answer_with_the_csrf_token_goes_to_the_job_through_the_store(
    source: Source, store: JobStore
) -> None:
    job_id = waiting_job(store)
    app = create_app(source, token=None, csrf=CSRF)
    body = urlencode({"answer": "Blue", "question_id": "q1", "other": "", "csrf": CSRF}).encode()
    status, headers, _ = request(app, "POST", f"/job/{job_id}/answer", body=body)
    assert status == 303 and dict(headers)["location"].startswith(f"/job/{job_id}?said=")
    assert store.take_sent(job_id) == [("answer", {"picks": [1], "text": None, "question": "q1"})]

    stale = urlencode({"answer": "Red", "question_id": "q0", "csrf": CSRF}).encode()
    status, headers, _ = request(app, "POST", f"/job/{job_id}/answer", body=stale)
    assert status == 303 and "failed=1" in dict(headers)["location"]  # the tools' rule: a gone question
    assert store.take_sent(job_id) == []

    cancel = urlencode({"csrf": CSRF}).encode()
    assert request(app, "POST", f"/job/{job_id}/cancel", body=cancel)[0] == 303
    assert store.cancel_requested(job_id)


# -- masks ------------------------------------------------------------------------------------------------
def test_the_pages_mask_secrets_in_summaries_questions_screens_and_results(
    source: Source, store: JobStore
) -> None:
    job_id = waiting_job(store)
    app = create_app(source, token=None, csrf=CSRF)
    _, _, listing = request(app, "GET", "/")
    _, _, page = request(app, "GET", f"/job/{job_id}")
    for shown in (listing, page):
        assert SECRET not in shown and KEY not in shown and "***" in shown
    assert "Which colour?" in page and 'value="Blue"' in page and "screen shows ***" in page
    done = store.create(tool="kimi_ask", workspace="/w", read_only=True, arguments={}, owner="1:1")
    store.finish(
        done.job_id, status="done", result={"output": f"the key is {SECRET}", "notes": [KEY]}, summary="ok"
    )
    _, _, finished = request(app, "GET", f"/job/{done.job_id}")
    assert "the key is ***" in finished and SECRET not in finished and KEY not in finished


def test_what_a_job_recorded_cannot_inject_markup(source: Source, store: JobStore) -> None:
    record = store.create(
        tool="kimi_ask",
        workspace="/w",
        read_only=True,
        arguments={},
        owner="1:1",
        summary="<script>x()</script>",
    )
    store.finish(
        record.job_id, status="done", result={"output": "<img src=x onerror=alert(1)>"}, summary="<b>"
    )
    app = create_app(source, token=None, csrf=CSRF)
    _, _, page = request(app, "GET", f"/job/{record.job_id}")
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


# -- usage ------------------------------------------------------------------------------------------------
def test_usage_sums_tokens_and_cost_per_day_and_model(store: JobStore) -> None:
    now = time.time()
    for model, tokens, cost in (("k2", 100, 0.5), ("k2", 50, None), ("turbo", 7, 0.25)):
        record = store.create(tool="kimi_ask", workspace="/w", read_only=True, arguments={}, owner="1:1")
        usage = {"input_tokens": tokens, "output_tokens": 0, "cost_usd": cost}
        store.finish(record.job_id, status="done", result={"usage": usage, "model": model}, summary="")
    data = usage_data(store, 1000, now=now)
    assert len(data["days"]) == 30 and data["daily"] == 1000
    assert data["models"]["k2"][-1] == 150 and data["models"]["turbo"][-1] == 7
    assert data["cost"][-1] == 0.75 and data["cost"][0] is None


# -- a job's page -----------------------------------------------------------------------------------------
def test_an_approval_a_multi_select_question_and_a_priced_result_render_as_their_forms() -> None:
    from kimi_mcp.dashboard._job_page import head, question
    from kimi_mcp.jobs import JobRecord

    def job(status: str, asked: dict | None, result: dict | None = None) -> JobRecord:
        return JobRecord(
            job_id="job_1", tool="kimi_code_task", workspace="/w", read_only=False, status=status,
            session_id=None, arguments={}, owner="12:34", started_at=time.time(), finished_at=None, summary="",
            progress=None, result=result, cancel_requested=False, question=asked,
        )  # fmt: skip

    approval = {"id": "a1", "kind": "approval", "text": "Run `touch x`?", "free_text": False,
                "options": [{"label": "approve"}, {"label": "reject"}]}  # fmt: skip
    form = question("", job("waiting", approval), CSRF)
    assert "Kimi asks for your approval" in form and 'name="other"' not in form
    assert 'name="answer" value="approve"' in form and 'name="answer" value="reject"' in form
    assert f'name="csrf" value="{CSRF}"' in form and 'name="question_id" value="a1"' in form
    multi = {"id": "m1", "text": "Which?", "multi_select": True, "options": [{"label": "A"}, {"label": "B"}]}
    form = question("", job("waiting", multi), CSRF)
    assert (
        form.count('type="checkbox" name="answer"') == 2 and 'name="pick"' in form and 'name="other"' in form
    )
    assert question("", job("running", approval), CSRF) == ""  # only a waiting job asks
    priced = job("done", None, {"usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0123}})
    shown = head("", priced, CSRF)
    assert "(0.0123 USD)" in shown and 'id="cancel"' not in shown  # a finished job is not cancelled
    assert 'id="cancel"' in head("", job("running", None), CSRF)


def test_free_text_wins_over_the_button_enter_pressed_and_an_empty_answer_is_refused(
    source: Source, store: JobStore
) -> None:
    job_id = waiting_job(store)
    app = create_app(source, token=None, csrf=CSRF)
    typed = urlencode(
        {"answer": "Red", "other": "purple, please", "question_id": "q1", "csrf": CSRF}
    ).encode()
    assert request(app, "POST", f"/job/{job_id}/answer", body=typed)[0] == 303
    assert store.take_sent(job_id) == [("answer", {"picks": [], "text": "purple, please", "question": "q1"})]
    empty = urlencode({"other": " ", "question_id": "q1", "csrf": CSRF}).encode()
    status, headers, _ = request(app, "POST", f"/job/{job_id}/answer", body=empty)
    assert (
        status == 303
        and "failed=1" in dict(headers)["location"]
        and "needs+an+answer" in dict(headers)["location"]
    )
    assert store.take_sent(job_id) == []


def test_the_table_names_a_finished_jobs_worker_and_cost(source: Source, store: JobStore) -> None:
    record = store.create(tool="kimi_ask", workspace="/w", read_only=True, arguments={}, owner="1:1")
    usage = {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.0421}
    store.finish(record.job_id, status="done", result={"usage": usage, "worker": "box-7"}, summary="ok")
    _, _, listing = request(create_app(source, token=None, csrf=CSRF), "GET", "/")
    row = listing[listing.index(f'<tr data-job="{record.job_id}"') :].split("</tr>")[0]
    assert "<td>box-7</td>" in row and ">0.0421</td>" in row and ">15</td>" in row


# -- the broker's workers -----------------------------------------------------------------------------------
def test_the_workers_section_lists_each_worker_its_running_jobs_and_when_it_was_last_seen() -> None:
    reading = Workers(
        "127.0.0.1:6379", [WorkerRow("box-1", 2, 1000.0), WorkerRow("<b>box-2</b>", 0, 940.0)], taken=1.0
    )
    shown = workers_view(reading, now=1003.0)
    assert "of the broker on 127.0.0.1:6379" in shown
    first = shown[shown.index('<tr data-worker="box-1">') :].split("</tr>")[0]
    assert '<td class="num jobs-running">2</td>' in first and "3s ago" in first
    second = shown[shown.index('<tr data-worker="&lt;b&gt;box-2&lt;/b&gt;">') :].split("</tr>")[0]
    assert '<td class="num jobs-running">0</td>' in second and "1m ago" in second and "<b>" not in second
    assert "No kimi-mcp worker" in workers_view(Workers("h:1"))
    assert 'class="error">the broker cannot' in workers_view(Workers("h:1", problem="the broker cannot"))


def test_without_a_broker_the_jobs_page_has_no_workers_and_loads_no_docket(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from test_dashboard import request\n"
        "from kimi_mcp import config\n"
        "from kimi_mcp.dashboard import Source, create_app\n"
        f"env = {{'HOME': {str(tmp_path)!r}, 'XDG_STATE_HOME': {str(tmp_path / 'state')!r}}}\n"
        "source = Source(config.configured(env)[0], env)\n"
        "status, _, page = request(create_app(source, token=None), 'GET', '/')\n"
        "source.close()\n"
        "print(status, 'id=\"workers\"' in page, [m for m in ('docket', 'redis') if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "200 False []", done.stdout + done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_with_a_broker_that_cannot_be_reached_the_jobs_page_says_so_and_still_lists_the_jobs(
    env: dict[str, str],
) -> None:
    port = free_port()  # nothing listens there
    env = {**env, "KIMI_MCP_BROKER": f"redis://127.0.0.1:{port}/0"}
    settings, problem = config.configured(env)
    assert problem is None
    source = Source(settings, env)
    try:
        status, _, page = request(create_app(source, token=None, csrf=CSRF), "GET", "/")
    finally:
        source.close()
    assert status == 200 and "No jobs." in page
    workers = page[page.index('<section id="workers" sse-swap="workers">') :]
    assert f"of the broker on 127.0.0.1:{port}" in workers
    assert f"the job broker (KIMI_MCP_BROKER, Redis on 127.0.0.1:{port}) cannot be reached" in workers
