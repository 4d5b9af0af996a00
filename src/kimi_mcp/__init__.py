"""kimi-mcp: delegate coding tasks to Kimi over MCP."""

__version__ = "0.1.0"
