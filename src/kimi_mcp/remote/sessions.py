"""Kimi's own files of one conversation, moved to another machine (a follow-up on another worker).

Both dialects keep a conversation under their home, in a folder keyed by the work directory's path
(:meth:`Driver.store_key`), and write absolute paths into it (the work directory; Kimi Code also its own
session folder and the key). :func:`pack` takes one conversation's folder as a gzipped tar with a manifest
of where it lay; :func:`place` puts it into this machine's Kimi home for another work directory: the old
work directory, folder and key are rewritten to the new ones in its JSON files (so the model's history
names paths that exist here; Kimi Code refuses a session logged under another key), and the dialect
registers it (:meth:`Driver.register_session`), after which ``-S <id>`` resumes it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from ..drivers.base import Driver
from ..errors import SessionError

MANIFEST = "kimi-mcp-session.json"
_FOLDER = "session"  # the conversation's folder inside the tar
_REWRITTEN = (".json", ".jsonl")  # the files that carry paths (logs, context, state, indexes)
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def pack(driver: type[Driver], env: dict[str, str], session_id: str, workdir: Path) -> bytes | None:
    """The conversation ``session_id`` (started in ``workdir``) as a gzipped tar, or None if this Kimi
    holds no such conversation."""
    root = driver.sessions_root(env)
    folder = root / driver.store_key(_real(workdir)) / session_id
    if not folder.is_dir():
        folder = next((p for p in root.glob(f"*/{session_id}") if p.is_dir()), folder)
    if not folder.is_dir():
        return None
    manifest = {
        "dialect": driver.name, "session_id": session_id, "workdir": _real(workdir), "folder": str(folder),
    }  # fmt: skip
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.add(folder, arcname=_FOLDER)
        raw = json.dumps(manifest).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    return out.getvalue()


def place(driver: type[Driver], env: dict[str, str], data: bytes, workdir: Path) -> str:
    """Put a :func:`pack`-ed conversation into this Kimi's home for ``workdir``; returns its session id."""
    try:
        return _place(driver, env, data, workdir)
    except (tarfile.TarError, OSError, KeyError, ValueError) as exc:
        raise SessionError(
            f"the conversation's files could not be put in this worker's Kimi home: {type(exc).__name__}: {exc}",
            suggestion="Start the task again; its copy and diff are kept on the server.",
        ) from exc


def _place(driver: type[Driver], env: dict[str, str], data: bytes, workdir: Path) -> str:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile(MANIFEST) if MANIFEST in tar.getnames() else None
        if member is None:
            raise SessionError("the conversation's files came without their manifest")
        manifest = json.loads(member.read())
        if manifest.get("dialect") != driver.name:
            raise SessionError(
                f"the conversation was held by a worker running {manifest.get('dialect')}; this worker runs "
                f"{driver.name}, which cannot resume it",
                suggestion="Run workers of one Kimi dialect, or start the task again.",
            )
        session_id = str(manifest.get("session_id", ""))
        if not _SESSION_ID.fullmatch(session_id):
            raise SessionError(f"the conversation's files name no valid session id: {session_id!r}")
        root = driver.sessions_root(env)
        new_dir = _real(workdir)
        folder = root / driver.store_key(new_dir) / session_id
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{session_id}.", dir=folder.parent))
        try:
            tar.extractall(staging, members=_under(tar, _FOLDER), filter="data")
            old_folder = Path(manifest["folder"])  # <old root>/<old key>/<id>: Kimi Code logs the key too
            moved = {
                str(old_folder): str(folder),
                manifest["workdir"]: new_dir,
                old_folder.parent.name: folder.parent.name,
            }
            _rewrite(staging / _FOLDER, moved)
            if folder.exists():  # an older copy of this conversation (it was here before): the new one wins
                shutil.rmtree(folder)
            os.replace(staging / _FOLDER, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    driver.register_session(env, session_id, new_dir, folder)
    return session_id


def _under(tar: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    return [m for m in tar.getmembers() if m.name == top or m.name.startswith(f"{top}/")]


def _rewrite(folder: Path, moved: dict[str, str]) -> None:
    """Replace each old path by its new one in the folder's JSON files (longest first, in one pass)."""
    olds = sorted((old for old, new in moved.items() if old and old != new), key=len, reverse=True)
    if not olds:
        return
    pattern = re.compile("|".join(re.escape(old) for old in olds).encode())
    table = {old.encode(): moved[old].encode() for old in olds}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name.endswith(_REWRITTEN):
            text = path.read_bytes()
            changed = pattern.sub(lambda m: table[m.group(0)], text)
            if changed != text:
                path.write_bytes(changed)


def _real(workdir: Path) -> str:
    return os.path.realpath(workdir)
