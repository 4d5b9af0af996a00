"""A fast connect over stdio: a client's handshake and tool list are answered at once, from what this same
kimi-mcp answered last time, while the server itself still imports the MCP SDK (on a busy machine that
takes seconds, and Claude Code gives a connecting server about ten before a call finds no tools).

Standard library only. ``FastConnect.start()`` moves the server onto pipes (fd 0 and 1) and relays between
them and the client's stdin and stdout in two threads. Every client message still reaches the server,
unchanged and in order; ``initialize``, ``server/discover`` and a first-page ``tools/list`` whose answer is
on record (for the same kimi-mcp, FastMCP, tool settings and protocol version) are also answered at once,
and the server's own answer to them is dropped (it is recorded when none was, or differed). Nothing else
is touched. ``KIMI_MCP_FAST_CONNECT=false`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

RECORDED = ("initialize", "server/discover", "tools/list")
_SOURCES = ("tools", "models.py", "cli.py", "config.py")  # what a tool list is built from


class FastConnect:
    """The relay between the client (the real stdin/stdout) and the server (the pipes on fd 0/1)."""

    def __init__(self, record: Path) -> None:
        self.record_path = record
        self.record: dict[str, Any] = _read(record)
        self.changed = False
        self._lock = threading.Lock()
        self._asked: dict[str, str] = {}  # request id (as JSON) -> its record key, until the server answers
        self._answered: set[str] = set()  # ids answered here: the server's answer is dropped
        self._era: str | None = None  # the protocol version an initialize asked for (handshake era)
        self._client_in = self._client_out = -1

    @classmethod
    def start(cls, environ: dict[str, str] | os._Environ[str] = os.environ) -> FastConnect | None:
        """Relay fd 0/1 through a fast connect (``None``: turned off, or not possible here)."""
        if environ.get("KIMI_MCP_FAST_CONNECT", "").strip().lower() in ("0", "false", "no", "off"):
            return None
        try:
            relay = cls(_record_path(environ))
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
                key, request_id = self._recordable(line)
                if key is not None and request_id is not None:
                    answer = self.record.get(key)
                    with self._lock:
                        if answer is not None:
                            self._answered.add(request_id)
                        self._asked[request_id] = key
                    if answer is not None:
                        reply = {"jsonrpc": "2.0", "id": json.loads(request_id), "result": answer}
                        self._write_client(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
                _write_all(self._to_server, line)
        with contextlib.suppress(OSError):
            os.close(self._to_server)  # the client went away: the server sees its stdin end

    def _recordable(self, line: bytes) -> tuple[str | None, str | None]:
        """(record key, request id as JSON) of a request whose answer may be on record, else (None, None)."""
        try:
            message = json.loads(line)
        except ValueError:
            return None, None
        if not isinstance(message, dict) or message.get("method") not in RECORDED or "id" not in message:
            return None, None
        params = message.get("params") or {}
        if not isinstance(params, dict) or params.get("cursor"):
            return None, None
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        version = meta.get("io.modelcontextprotocol/protocolVersion") or params.get("protocolVersion")
        if message["method"] == "initialize":
            self._era = version
        version = version or self._era
        if not version:
            return None, None
        capabilities = json.dumps(meta.get("io.modelcontextprotocol/clientCapabilities"), sort_keys=True)
        key = (
            f"{message['method']} {version} {capabilities if message['method'] == 'server/discover' else ''}"
        )
        return key.strip(), json.dumps(message["id"])

    # -- server -> client ------------------------------------------------------------------------------
    def _to_client(self) -> None:
        with os.fdopen(self._from_server, "rb", buffering=0) as raw, contextlib.suppress(OSError):
            for line in _lines(raw):
                if not self._answered_here(line):
                    self._write_client(line)
        self._save()

    def _answered_here(self, line: bytes) -> bool:
        """Whether ``line`` answers a request answered here already (recording it when it is new)."""
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "id" not in message or "method" in message:
            return False
        request_id = json.dumps(message["id"])
        with self._lock:
            key = self._asked.pop(request_id, None)
            answered = request_id in self._answered
            self._answered.discard(request_id)
        if key is not None and "result" in message and self.record.get(key) != message["result"]:
            self.record[key] = message["result"]
            self.changed = True
            self._save()
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


def _record_path(environ: dict[str, str] | os._Environ[str]) -> Path:
    """One record per kimi-mcp install and tool configuration (a changed one is a new record)."""
    here = Path(__file__).resolve().parent
    stamp = hashlib.sha256()
    for name in ("kimi-mcp", "fastmcp", "mcp"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            stamp.update(f"{name}={metadata.version(name)};".encode())
    for source in _SOURCES:
        for path in sorted((here / source).rglob("*.py")) if (here / source).is_dir() else [here / source]:
            with contextlib.suppress(OSError):
                st = path.stat()
                stamp.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    stamp.update(environ.get("KIMI_MCP_TOOLS", "").encode())
    config = environ.get("KIMI_MCP_CONFIG") or os.path.join(
        environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "kimi-mcp", "config.toml"
    )
    with contextlib.suppress(OSError):
        stamp.update(Path(config).read_bytes())
    cache = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "kimi-mcp" / f"connect-{stamp.hexdigest()[:24]}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


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
