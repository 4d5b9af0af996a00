"""python -m kimi_mcp"""

from .cli import main

main()
