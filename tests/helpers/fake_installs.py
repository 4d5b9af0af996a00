"""Kimi installs laid out as the real ones are (package metadata, a launcher) but running nothing real: what
reads an install's metadata (``drivers.probe``, ``status``) is tested without installing Kimi."""

from __future__ import annotations

import json
from pathlib import Path


def fake_kimi_code(root: Path, version: str, name: str = "@moonshot-ai/kimi-code") -> Path:
    package = root / "node_modules" / "@moonshot-ai" / "kimi-code"
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": name, "version": version}))
    main = package / "dist" / "main.mjs"
    main.write_text("#!/usr/bin/env node\nrequire('fs').writeFileSync('RAN', 'x')\n")
    main.chmod(0o755)
    (root / "node_modules" / ".bin").mkdir()
    link = root / "node_modules" / ".bin" / "kimi"
    link.symlink_to(main)
    return link


def fake_kimi_cli(root: Path, version: str, *, stub: bool = False) -> Path:
    """A kimi-cli install's layout: its dist-info, and for the deprecation stub ``kimi_cli/deprecation.py``."""
    venv = root / "tools" / "kimi-cli"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    site = venv / "lib" / "python3.13" / "site-packages"
    (site / f"kimi_cli-{version}.dist-info").mkdir(parents=True)
    (site / "kimi_cli").mkdir()
    (site / "kimi_cli" / "app.py").write_text("")
    if stub:
        (site / "kimi_cli" / "deprecation.py").write_text("")
    script = root / "bin" / "kimi"
    script.parent.mkdir()
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys; open('RAN', 'w')\n")
    script.chmod(0o755)
    return script
