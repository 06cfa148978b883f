"""The official MCP Python SDK (PyPI: mcp) as a client of Switchboard's sessions over
streamable HTTP (`/v1/mcp`): tools listed, a session started, a message sent and its reply
streamed as progress, the transcript read, an approval seen and denied with a reason, and a
token with `sessions:read` only refused what it may not do.

Run by crates/cli/tests/hub_acp/mcp.rs with MCP_URL, TOKEN, READ_TOKEN and WS set; prints
one JSON line of what it saw. Every check fails the script with a message.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

WAIT = 60
TOOLS = {"list_sessions", "start_session", "send_message", "read_transcript", "list_approvals", "decide_approval", "search_sessions"}


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def body(res):
    """The tool's JSON answer (structured content, else the text)."""
    sc = getattr(res, "structured_content", None) or getattr(res, "structuredContent", None)
    if sc is not None:
        return sc
    return json.loads(res.content[0].text)


def is_error(res):
    return bool(getattr(res, "is_error", None) or getattr(res, "isError", False))


async def connected(token, run):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(os.environ["MCP_URL"], http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as s:
                await asyncio.wait_for(s.initialize(), WAIT)
                return await run(s)


async def main_client(s):
    ws = os.environ["WS"]
    out = {}
    tools = await asyncio.wait_for(s.list_tools(), WAIT)
    names = {t.name for t in tools.tools}
    check(names == TOOLS, f"the session tools, got {sorted(names)}")

    # A session of the built-in agent: the reply streams as progress, then comes whole.
    res = await asyncio.wait_for(s.call_tool("start_session", {"agent": "builtin", "cwd": ws, "title": "from MCP"}), WAIT)
    check(not is_error(res), f"start_session: {res}")
    sid = body(res)["id"]
    out["builtin"] = sid
    progress = []

    async def on_progress(p, total, message):
        progress.append(message)

    res = await asyncio.wait_for(
        s.call_tool("send_message", {"session": sid, "message": "hello over MCP"}, progress_callback=on_progress), WAIT
    )
    check(not is_error(res), f"send_message: {res}")
    answer = body(res)
    check(answer["status"] == "completed", f"completed, got {answer}")
    check(answer["reply"], f"a reply, got {answer}")
    check(progress and any(m and answer["reply"].startswith(m) for m in progress), f"the reply streamed as progress, got {progress}")
    out["reply"] = answer["reply"]

    res = await asyncio.wait_for(s.call_tool("read_transcript", {"session": sid}), WAIT)
    check("hello over MCP" in body(res)["transcript"], "the transcript has the message")
    res = await asyncio.wait_for(s.call_tool("list_sessions", {}), WAIT)
    check(sid in [x["id"] for x in body(res)["sessions"]], "the session is listed")
    res = await asyncio.wait_for(s.call_tool("search_sessions", {"query": "hello over", "session": sid}), WAIT)
    hits = body(res)["hits"]
    check(hits and hits[0]["session_id"] == sid and "**hello**" in hits[0]["passage"].lower(), f"search finds the message, got {res}")

    # A call that waits for approval: seen in list_approvals, denied with a reason.
    res = await asyncio.wait_for(s.call_tool("start_session", {"agent": "test", "cwd": ws}), WAIT)
    tid = body(res)["id"]
    out["tool"] = tid
    waiting = []

    async def on_wait(p, total, message):
        waiting.append(message)

    turn = asyncio.create_task(
        s.call_tool("send_message", {"session": tid, "message": "[tool]"}, progress_callback=on_wait)
    )
    approval = None
    for _ in range(300):
        res = await asyncio.wait_for(s.call_tool("list_approvals", {}), WAIT)
        mine = [a for a in body(res)["approvals"] if a["session_id"] == tid]
        if mine:
            approval = mine[0]
            break
        await asyncio.sleep(0.1)
    check(approval is not None, "the waiting call is listed")
    call = approval["tool_calls"][0]["id"]
    res = await asyncio.wait_for(
        s.call_tool(
            "decide_approval",
            {"session": tid, "run_id": approval["run_id"], "tool_call_id": call, "decision": "deny", "reason": "not over MCP"},
        ),
        WAIT,
    )
    check(not is_error(res), f"decide_approval: {res}")
    res = await asyncio.wait_for(turn, WAIT)
    answer = body(res)
    check(answer["status"] == "completed", f"completed after the denial, got {answer}")
    check("rejected" in answer["reply"], f"the agent heard of the rejection, got {answer}")
    check(any("waiting for approval" in (m or "") and call in (m or "") for m in waiting), f"progress named the waiting call, got {waiting}")

    # The agent's own question (acp__elicitation) is answered with decision `answer`.
    turn = asyncio.create_task(s.call_tool("send_message", {"session": tid, "message": "[elicit]"}))
    question = None
    for _ in range(300):
        res = await asyncio.wait_for(s.call_tool("list_approvals", {}), WAIT)
        mine = [a for a in body(res)["approvals"] if a["session_id"] == tid]
        if mine:
            question = mine[0]
            break
        await asyncio.sleep(0.1)
    check(question is not None and question["tool_calls"][0]["name"] == "acp__elicitation", f"the question is listed, got {question}")
    res = await asyncio.wait_for(
        s.call_tool(
            "decide_approval",
            {"session": tid, "run_id": question["run_id"], "tool_call_id": question["tool_calls"][0]["id"],
             "decision": "answer", "answer": '{"branch": "over-mcp"}'},
        ),
        WAIT,
    )
    check(not is_error(res), f"decide_approval answer: {res}")
    res = await asyncio.wait_for(turn, WAIT)
    said = body(res)["reply"]
    check('answer: accept {"branch":"over-mcp","force":false}' in said, f"the agent got the answer, said {said!r}")

    # Errors are tool errors with Switchboard's code; the connection goes on.
    res = await asyncio.wait_for(s.call_tool("send_message", {"session": "not-an-id", "message": "x"}), WAIT)
    check(is_error(res) and body(res)["code"] == "validation_failed", f"a bad id is refused, got {res}")
    res = await asyncio.wait_for(
        s.call_tool("read_transcript", {"session": "00000000-0000-7000-8000-000000000000"}), WAIT
    )
    check(is_error(res) and body(res)["code"] == "session_not_found", f"an unknown session is not found, got {res}")
    return out


async def read_only_client(s):
    """A token with `sessions:read` only: reads, but neither starts, sends nor decides."""
    sid = os.environ["BUILTIN"]
    res = await asyncio.wait_for(s.call_tool("start_session", {}), WAIT)
    check(is_error(res), f"a read-only token starts no session, got {res}")
    start = body(res)["code"]
    res = await asyncio.wait_for(s.call_tool("send_message", {"session": sid, "message": "x"}), WAIT)
    check(is_error(res), f"a read-only token sends nothing, got {res}")
    send = body(res)["code"]
    res = await asyncio.wait_for(s.call_tool("list_sessions", {}), WAIT)
    check(not is_error(res), f"a read-only token lists, got {res}")
    return {"start": start, "send": send, "listed": [x["id"] for x in body(res)["sessions"]]}


async def stdio_client_run():
    """`switchboard mcp --hub` over stdio: the same tools."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=os.environ["SWITCHBOARD_BIN"], args=["mcp", "--hub"], env=dict(os.environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await asyncio.wait_for(s.initialize(), WAIT)
            tools = await asyncio.wait_for(s.list_tools(), WAIT)
            check({t.name for t in tools.tools} == TOOLS, "the same tools over stdio")
            res = await asyncio.wait_for(s.call_tool("list_sessions", {}), WAIT)
            return {"sessions": [x["id"] for x in body(res)["sessions"]]}


if __name__ == "__main__":
    if sys.argv[1] == "main":
        print(json.dumps(asyncio.run(connected(os.environ["TOKEN"], main_client))), flush=True)
    elif sys.argv[1] == "stdio":
        print(json.dumps(asyncio.run(stdio_client_run())), flush=True)
    else:
        print(json.dumps(asyncio.run(connected(os.environ["READ_TOKEN"], read_only_client))), flush=True)
