"""``python -m kimi_mcp.cli``: the ``kimi-mcp`` command."""

from . import main

main()
