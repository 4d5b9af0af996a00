"""python -m kimi_mcp"""

from .server import main

main()
