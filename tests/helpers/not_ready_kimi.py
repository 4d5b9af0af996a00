"""A Kimi Code that looks ready with its model, then answers the first message with "LLM not set": what Kimi
Code 2.1 did on a heavily loaded machine (its model was not set yet when the prompt came). ``/exit`` or Ctrl-C
ends it. Run on a pty by :func:`wrapper` for the first Kimi a test's server starts; every later one is real.
"""

from __future__ import annotations

import os
import sys
import tty
from pathlib import Path

WELCOME = (
    " ╭──────────────────────────────────────────────────────────────╮\r\n"
    " │  ▐█▛█▛█▌  Welcome to Kimi Code!                              │\r\n"
    " │  ▐█████▌  Send /help for help information.                   │\r\n"
    " │  Directory: {cwd}\r\n"
    " │  Session:                                                    │\r\n"
    " │  Model:     kimi-k2-fake                                     │\r\n"
    " │  Version:   2.1.0                                            │\r\n"
    " ╰──────────────────────────────────────────────────────────────╯\r\n"
    "   No session yet — one will be created on your first message.\r\n"
)
INPUT_BOX = (
    " ╭──────────────────────────────────────────────────────────────╮\r\n"
    " │ >                                                            │\r\n"
    " ╰──────────────────────────────────────────────────────────────╯\r\n"
    " kimi-k2-fake\r\n"
)
NOT_SET = ' Error: LLM not set, send "/login" to login\r\n'


def wrapper(folder: Path, real_kimi: Path) -> Path:
    """A ``kimi`` that runs this script the first time it is started for a session (``--version`` goes to the
    real one), and the real Kimi Code every later time."""
    script = folder / "kimi"
    once = folder / "not-ready-started"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" != "--version" ] && mkdir "{once}" 2>/dev/null; then\n'
        f'  exec "{sys.executable}" "{Path(__file__).resolve()}"\n'
        "fi\n"
        f'exec "{real_kimi}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def main() -> None:
    tty.setraw(0)
    write = sys.stdout.write
    write(WELCOME.format(cwd=os.getcwd()) + INPUT_BOX)
    sys.stdout.flush()
    typed = ""
    while data := os.read(0, 4096).decode("utf-8", "replace"):
        if "\x03" in data:
            return
        typed += data
        while "\r" in typed:
            line, _, typed = typed.partition("\r")
            text = line.replace("\x1b[200~", "").replace("\x1b[201~", "").replace("\x7f", "").strip()
            if text == "/exit":
                write(" Bye!\r\n")
                sys.stdout.flush()
                return
            if text:
                write(f" ✨ {text.splitlines()[0]}\r\n" + NOT_SET + INPUT_BOX)
                sys.stdout.flush()


if __name__ == "__main__":
    main()
