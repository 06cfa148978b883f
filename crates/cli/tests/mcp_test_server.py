"""A small MCP server for the tests, on the official Python SDK (PyPI `mcp`): `add`
(annotated read-only) and `note` (writes note.txt in its working directory).

Over stdio by default; `--http PORT` serves streamable HTTP at http://127.0.0.1:PORT/mcp,
where every request must carry `Authorization: Bearer $MCP_TEST_TOKEN` (else 401). With
port 0 it binds a port of its own choosing and prints `listening on http://127.0.0.1:PORT`
once it accepts connections: a port picked by the test and bound later could be taken in
between by another process of the tests."""

import os
import sys

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


def serve_http(port: int) -> None:
    import socket

    import uvicorn

    app = server.streamable_http_app()
    expected = ("Bearer " + os.environ.get("MCP_TEST_TOKEN", "")).encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(guarded, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        server.run()
