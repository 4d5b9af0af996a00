"""A fake of what ``kimi-mcp install-kimi`` leaves in its prefix (npm's layout: Kimi Code's package with its
``package.json``, a Node package whose ``node`` prints a version, the ``.bin`` links, the marker), for unit
tests of finding and reporting it without npm or the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kimi_mcp import own_kimi


def fake_own_install(
    prefix: Path, version: str = "2.1.0", node_version: str = "v22.23.3", marked: bool = True
) -> Path:
    """The fake install's ``kimi`` (``prefix/node_modules/.bin/kimi``)."""
    modules = prefix / "node_modules"
    package = modules / "@moonshot-ai" / "kimi-code"
    (package / "dist").mkdir(parents=True, exist_ok=True)
    (package / "package.json").write_text(json.dumps({"name": "@moonshot-ai/kimi-code", "version": version}))
    main = package / "dist" / "main.mjs"
    main.write_text("#!/usr/bin/env node\nprocess.exit(0)\n")
    main.chmod(0o755)
    node = modules / "node-test-platform" / "bin" / "node"
    node.parent.mkdir(parents=True, exist_ok=True)
    node.write_text(f"#!/bin/sh\necho {node_version}\n")
    node.chmod(0o755)
    (modules / ".bin").mkdir(exist_ok=True)
    for link, target in ((own_kimi.kimi_path(prefix), main), (own_kimi.node_path(prefix), node)):
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    if marked:
        own_kimi.write_marker(prefix)
    return own_kimi.kimi_path(prefix)


def fake_npm(folder: Path, log: Path, exit_code: int = 0) -> Path:
    """An ``npm`` that records its arguments and working directory in ``log`` and, for ``install``, lays out
    the fake install in its working directory with the requested Kimi Code version."""
    folder.mkdir(parents=True, exist_ok=True)
    npm = folder / "npm"
    npm.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\n"
        "from own_install import fake_own_install\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps([os.getcwd(), sys.argv[1:]]) + '\\n')\n"
        "spec = [a for a in sys.argv if a.startswith('@moonshot-ai/kimi-code@')]\n"
        f"if spec and {exit_code} == 0: fake_own_install(Path.cwd(), spec[0].rsplit('@', 1)[1])\n"
        f"sys.exit({exit_code})\n"
    )
    npm.chmod(0o755)
    return npm
