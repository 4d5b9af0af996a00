"""A fast connect over stdio: a client's handshake and tool list are answered at once, from what this same
kimi-mcp answered last time, while the server itself still imports the MCP SDK (on a busy machine that
takes seconds, and Claude Code gives a connecting server about ten before a call finds no tools).

Standard library only. ``FastConnect.start()`` reads the ``.env`` (``_sources``: ``KIMI_MCP_FAST_CONNECT=false``
there turns this off too), then moves the server onto pipes (fd 0 and 1) and relays between them and the
client's stdin and stdout in two threads. Every client message still reaches the server, unchanged and in
order; ``initialize``, ``server/discover`` and a first-page ``tools/list`` whose answer is on record are also
answered at once, and the server's own answer to them is dropped. The record's key (:func:`record_path`)
covers every input of those answers: the Python, the package's files, the installed distributions, the
``KIMI_MCP_*``/``FASTMCP_*`` variables (the ``.env``'s included), the ``.env`` and the config file. A record
the server contradicts is corrected, the client is sent ``notifications/tools/list_changed`` for a tool
list, and the rest of the session asks the server. A ``tools/list`` answered here reaches the server only once
it has started and answered every request only it can answer (or when the client leaves, which then waits
a few seconds for that check): a client's first tool call is not queued behind the server building every
tool's schema for a list the client already has. A server that cannot start (:meth:`FastConnect.refused`)
answers the client's requests with the reason as a JSON-RPC error, not a dropped connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._sources import config_file_path, settings_environment
from .kimi_dirs import cache_dir

RECORDED = ("initialize", "server/discover", "tools/list")
HANDSHAKE = ("initialize", "server/discover")
LIST_CHANGED = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n'
_KEYED_VARIABLES = ("KIMI_MCP_", "FASTMCP_")  # the settings the server's answers may depend on
_KEEP_RECORDS = 16  # the records most recently used are kept; older ones go when a new one is written
_CHECK_WAIT_S = 5.0  # how long a client that left waits for the server to check a tool list answered here
_OFF = ("0", "false", "no", "off")


class FastConnect:
    """The relay between the client (the real stdin/stdout) and the server (the pipes on fd 0/1)."""

    def __init__(self, record: Path) -> None:
        self.record_path = record
        self.record: dict[str, Any] = _read(record)
        if self.record:
            with contextlib.suppress(OSError):
                os.utime(record)  # in use: kept when old records are pruned
        self.changed = False
        self._lock = threading.Lock()
        self._asked: dict[str, str] = {}  # request id (as JSON) -> its record key, until the server answers
        self._answered: set[str] = set()  # ids answered here: the server's answer is dropped
        self._pending: dict[str, Any] = {}  # id (as JSON) -> id of a request only the server can answer
        self._distrusted: set[str] = set()  # record keys the server contradicted: it answers them itself
        self._era: str | None = None  # the protocol version an initialize asked for (handshake era)
        self._connected = False  # the client has a handshake answer
        self._served = False  # the server has written something: it had started
        self._announces = False  # ... which declares tools.listChanged
        self._refusal: dict[str, Any] | None = None  # the error every request gets: the server did not start
        self._held: list[bytes] = []  # tool lists answered here, for the server once it is idle
        self._checking: set[str] = set()  # ids of those the server has been sent and not answered yet
        self._checked = threading.Condition(self._lock)  # notified when the server answers one, or ends
        self._server_gone = False
        self._server_lock = threading.Lock()  # one writer at a time to the server's stdin
        self._first_call: dict[str, Any] | None = None  # the params of the client's first tools/call
        self._on_first_call: Callable[[Any], None] | None = None
        self._client_gone = threading.Event()
        self._client_in = self._client_out = -1

    @classmethod
    def start(cls, environ: Mapping[str, str] = os.environ) -> FastConnect | None:
        """Relay fd 0/1 through a fast connect (``None``: turned off, or not possible here)."""
        view, env_bytes = settings_environment(environ)
        if view.get("KIMI_MCP_FAST_CONNECT", "").strip().lower() in _OFF:
            return None
        try:
            relay = cls(record_path(view, env_bytes))
            relay._plumb()
        except OSError:
            return None
        return relay

    def _plumb(self) -> None:
        self._client_in, self._client_out = os.dup(0), os.dup(1)
        server_in, self._to_server = os.pipe()
        self._from_server, server_out = os.pipe()
        os.dup2(server_in, 0)
        os.dup2(server_out, 1)
        os.close(server_in)
        os.close(server_out)
        for fd in (self._client_in, self._client_out, self._to_server, self._from_server):
            os.set_inheritable(fd, False)
        self._out_lock = threading.Lock()
        threading.Thread(target=self._from_client, name="kimi-connect-in", daemon=True).start()
        threading.Thread(target=self._to_client, name="kimi-connect-out", daemon=True).start()

    # -- client -> server ------------------------------------------------------------------------------
    def _from_client(self) -> None:
        with os.fdopen(self._client_in, "rb", buffering=0) as raw, contextlib.suppress(OSError):
            for line in _lines(raw):
                reply, forward = self._take(line)
                if reply is not None:
                    self._write_client(_encode(reply))
                if forward:
                    self._to_server_now(line)
        self._release(leaving=True)
        with self._lock:  # the server checks what was held back before its stdin ends (it may be busy)
            self._checked.wait_for(lambda: not self._checking or self._server_gone, timeout=_CHECK_WAIT_S)
        with contextlib.suppress(OSError):
            os.close(self._to_server)  # the client went away: the server sees its stdin end
        self._client_gone.set()

    def _to_server_now(self, line: bytes) -> None:
        with self._server_lock, contextlib.suppress(OSError):  # a server that is gone reads nothing
            _write_all(self._to_server, line)

    def _release(self, leaving: bool = False) -> None:
        """Send the server the tool lists held back, once it is idle (answered everything it alone can
        answer) or the client is ``leaving``."""
        with self._lock:
            if not self._held or not (leaving or self._idle()):
                return
            held, self._held = self._held, []
        for line in held:
            self._to_server_now(line)

    def on_first_call(self, callback: Callable[[Any], None]) -> None:
        """Have ``callback(params)`` told of the client's first ``tools/call`` (at once if it came already),
        in the relay's thread: the server learns of it while it still loads (``first_call``)."""
        with self._lock:
            self._on_first_call = callback
            params = self._first_call
        if params is not None:
            callback(params)

    def _idle(self) -> bool:
        """The server has started and answered every request only it can answer (call under the lock)."""
        return self._served and not self._pending

    def _take(self, line: bytes) -> tuple[dict[str, Any] | None, bool]:
        """A client message: the answer given here (or None), and whether the server is to get it now."""
        message = _parse(line)
        if message is None or "method" not in message or "id" not in message:
            return None, self._refusal is None  # not a request: nothing to answer
        key = self._recordable(message)
        request_id = json.dumps(message["id"])
        announce: Callable[[Any], None] | None = None
        with self._lock:
            if self._refusal is not None:
                return {"jsonrpc": "2.0", "id": message["id"], "error": self._refusal}, False
            answer = self.record.get(key) if key is not None and key not in self._distrusted else None
            if answer is None:
                self._pending[request_id] = message["id"]
            else:
                self._answered.add(request_id)
                self._handshake_seen(message["method"], answer)
            if key is not None:
                self._asked[request_id] = key
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer} if answer is not None else None
            held = reply is not None and message["method"] == "tools/list" and not self._idle()
            if held:
                self._held.append(line)  # the server checks it once idle (see _release)
                self._checking.add(request_id)
            if message["method"] == "tools/call" and self._first_call is None:
                self._first_call = message.get("params") or {}
                announce = self._on_first_call
        if announce is not None:
            announce(self._first_call)
        return reply, not held

    def _recordable(self, message: dict[str, Any]) -> str | None:
        """The record key of a request whose answer may be on record, else None."""
        if message["method"] not in RECORDED:
            return None
        params = message.get("params") or {}
        if not isinstance(params, dict) or params.get("cursor"):
            return None
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        version = meta.get("io.modelcontextprotocol/protocolVersion") or params.get("protocolVersion")
        if message["method"] == "initialize":
            self._era = version
        version = version or self._era
        if not version:
            return None
        capabilities = json.dumps(meta.get("io.modelcontextprotocol/clientCapabilities"), sort_keys=True)
        key = (
            f"{message['method']} {version} {capabilities if message['method'] == 'server/discover' else ''}"
        )
        return key.strip()

    def _handshake_seen(self, method: str, result: Any) -> None:
        """The client got ``result`` for ``method``: a handshake makes it connected (call under the lock)."""
        if method in HANDSHAKE and isinstance(result, dict):
            self._connected = True
            tools = (result.get("capabilities") or {}).get("tools") or {}
            self._announces = isinstance(tools, dict) and tools.get("listChanged") is True

    # -- server -> client ------------------------------------------------------------------------------
    def _to_client(self) -> None:
        with os.fdopen(self._from_server, "rb", buffering=0) as raw, contextlib.suppress(OSError):
            for line in _lines(raw):
                if not self._answered_here(line):
                    self._write_client(line)
                self._release()
        with self._lock:
            self._server_gone = True
            self._checked.notify_all()
        self._save()

    def _answered_here(self, line: bytes) -> bool:
        """Whether ``line`` answers a request answered here already (recording it when it is new, and
        telling the client when the answer it got was wrong)."""
        self._served = True
        message = _parse(line)
        if message is None or "id" not in message or "method" in message:
            return False
        request_id = json.dumps(message["id"])
        try:
            return self._recorded(request_id, message.get("result"))
        finally:  # a client that left waits for this check (now recorded) before the server's stdin ends
            with self._lock:
                if request_id in self._checking:
                    self._checking.discard(request_id)
                    self._checked.notify_all()

    def _recorded(self, request_id: str, result: Any) -> bool:
        """The server answered ``request_id`` with ``result``: see :meth:`_answered_here`."""
        with self._lock:
            key = self._asked.pop(request_id, None)
            answered = request_id in self._answered
            self._answered.discard(request_id)
            self._pending.pop(request_id, None)
            if key is None or result is None:
                return answered
            if not answered:
                self._handshake_seen(key.split(" ", 1)[0], result)
            wrong = self.record.get(key) != result
            if wrong:
                self.record[key] = result
                self.changed = True
            if wrong and answered:
                self._distrusted.add(key)  # the rest of the session asks the server
        if wrong:
            self._save()
        if wrong and answered and key.startswith("tools/list") and self._announces:
            self._write_client(LIST_CHANGED)
        elif wrong and answered:
            print(f"kimi-mcp: the recorded answer to {key} was not the server's (corrected)", file=sys.stderr)
        return answered

    def _write_client(self, data: bytes) -> None:
        with self._out_lock:
            _write_all(self._client_out, data)

    def _save(self) -> None:
        if not self.changed:
            return
        with contextlib.suppress(OSError):
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.record_path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(self.record), encoding="utf-8")
            os.replace(temporary, self.record_path)
            self.changed = False
            _prune(self.record_path.parent)

    # -- a server that could not start -----------------------------------------------------------------
    def refused(self, exc: BaseException) -> None:
        """The server ended with ``exc`` (at its start, or a crash): unless that is an ordinary end (a clean exit,
        a signal, Ctrl-C), every request it did not answer gets the reason as an error, and a client that has
        its handshake gets the same answer to every later request until it hangs up."""
        error = refusal(exc, "stopped" if self._served else "could not start")
        if error is None:
            return
        with self._lock:
            self._refusal = error
            waiting = list(self._pending.values())
            self._pending.clear()
            connected = self._connected
            self._held.clear()  # nothing is left to check
            self._server_gone = True
            self._checked.notify_all()
        with contextlib.suppress(OSError):  # nothing reads the server's stdin any more: a write to it
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # fails (no reader left) instead of blocking
        for request_id in waiting:
            self._write_client(_encode({"jsonrpc": "2.0", "id": request_id, "error": error}))
        if connected:
            self._client_gone.wait()


def refusal(exc: BaseException, what: str = "could not start") -> dict[str, Any] | None:
    """The JSON-RPC error that says why the server ``what`` (could not start, stopped), ended by ``exc``; None
    for an ordinary end. A refusal the server gives (``SystemExit`` from its reason) is a configuration error;
    the text is masked like the server's logs."""
    if isinstance(exc, KeyboardInterrupt):
        return None
    cause = exc.__cause__ if isinstance(exc, SystemExit) else exc
    if isinstance(exc, SystemExit) and cause is None:
        code = exc.code
        if code is None or code == 0 or (isinstance(code, int) and code >= 128):  # done, or a signal
            return None
        reason = code if isinstance(code, str) else f"it exited with status {code}"
        kind = "session"
    else:
        reason = str(cause) if isinstance(exc, SystemExit) else f"{type(cause).__name__}: {cause}"
        kind = (
            "config" if isinstance(exc, SystemExit)
            else "install" if isinstance(cause, ImportError)
            else "filesystem" if isinstance(cause, OSError)
            else "session"
        )  # fmt: skip
    message = f"kimi-mcp {what}: {_masked(reason)}"
    data = {
        "type": kind, "message": message, "retryable": False,
        "suggestion": "Fix what the message names, then restart the MCP server (`kimi-mcp --check` in a terminal "
        "checks the configuration and the Kimi install); the server's log (stderr) has the details.",
    }  # fmt: skip
    return {"code": -32000, "message": message, "data": data}


def _masked(text: str) -> str:
    try:  # loaded on this rare path only, and it may be what could not load
        from .secrets import Redactor, configured_secrets

        return Redactor(configured_secrets(os.environ))(text)
    except Exception:
        return "(the reason could not be masked; see the server's log on stderr)"


def record_path(view: Mapping[str, str], env_file: bytes = b"") -> Path:
    """The record for everything the recorded answers are made of: this Python, every file of this package,
    the distributions installed on ``sys.path``, the ``KIMI_MCP_*`` and ``FASTMCP_*`` variables
    of ``view`` (the environment over its ``.env``), the ``.env`` itself and the config file."""
    stamp = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        stamp.update(f"{label}:{len(data)}:".encode() + data)

    add("python", sys.version.encode())
    package = Path(__file__).resolve().parent
    for path in _package_files(package):
        with contextlib.suppress(OSError):
            add(path.relative_to(package).as_posix(), path.read_bytes())
    for folder in sys.path:
        add("path", folder.encode(errors="surrogateescape"))
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(folder or ".")):
                if name.endswith((".dist-info", ".egg-info")):
                    add("distribution", name.encode(errors="surrogateescape"))
    settings = sorted((k, v) for k, v in view.items() if k.startswith(_KEYED_VARIABLES))
    add("settings", json.dumps(settings).encode(errors="surrogateescape"))
    add(".env", env_file)
    config = b""
    with contextlib.suppress(OSError):
        config = config_file_path(view).read_bytes()
    add("config", config)
    return cache_dir(view) / f"connect-{stamp.hexdigest()[:24]}.json"


def _package_files(package: Path) -> list[Path]:
    files = []
    for root, folders, names in os.walk(package):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        files += [Path(root, name) for name in sorted(names)]
    return files


def _prune(folder: Path) -> None:
    """Keep the records used most recently (a changed input leaves its old record unused)."""
    with contextlib.suppress(OSError):
        kept = sorted(folder.glob("connect-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[_KEEP_RECORDS:]:
            old.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _lines(raw: Any) -> Any:
    """The newline-delimited messages of a binary stream, as they come (each with its newline)."""
    buffer = b""
    while True:
        chunk = raw.read(65536)
        if not chunk:
            if buffer:
                yield buffer
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
