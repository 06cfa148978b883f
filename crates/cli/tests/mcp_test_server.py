"""A small MCP server for the tests, on the official Python SDK (PyPI `mcp`), over stdio:
`add` (annotated read-only) and `note` (writes note.txt in its working directory)."""

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
from mcp.types import ToolAnnotations

server = Server("calc")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def note(text: str) -> str:
    """Write a note to note.txt."""
    with open("note.txt", "w") as f:
        f.write(text)
    return "noted"


if __name__ == "__main__":
    server.run()
