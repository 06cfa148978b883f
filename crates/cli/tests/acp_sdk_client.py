"""The official Python ACP SDK (PyPI: agent-client-protocol) as an editor of
`switchboard acp`: the stable methods an ACP client has beyond create/prompt/approve —
config options (mode and model), usage and title updates, session/list with its cwd
filter, close, resume (also after the server restarted), delete, and a denial whose reason
comes from an elicitation form, and an agent's own question asked as its form.

Run by crates/cli/tests/hub_acp/sdk.rs with SWITCHBOARD_BIN, SWITCHBOARD_URL,
SWITCHBOARD_TOKEN and WS (a workspace) set; `main` prints the session ids it made as one
JSON line, `resume SESSION` resumes one (the server restarted in between) and prompts it.
Every check fails the script with a message saying what was expected.
"""

import asyncio
import json
import os
import sys

import acp
from acp import schema, spawn_agent_process, text_block

WAIT = 60


class Editor:
    """What an editor does with what the agent sends: records updates, answers permission
    requests with `choice`, fills the reason form with `reason`."""

    def __init__(self):
        self.updates = []
        self.asked = []
        self.forms = []
        self.choice = "allow"
        self.reason = None

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append((session_id, update))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asked.append([o.option_id for o in options])
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=self.choice)
        )

    async def create_elicitation(self, message, mode, **kwargs):
        self.forms.append((message, mode))
        if message.startswith("Which branch"):
            # The agent's own question, asked as the form it is: its fields filled.
            return schema.AcceptElicitationResponse(action="accept", content={"branch": "from-editor"})
        if self.reason is None:
            return schema.DeclineElicitationResponse(action="decline")
        return schema.AcceptElicitationResponse(action="accept", content={"reason": self.reason})

    def of(self, session, kind):
        return [u for (s, u) in self.updates if s == session and u.session_update == kind]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def caps():
    return schema.ClientCapabilities(
        elicitation=schema.ElicitationCapabilities(form=schema.ElicitationFormCapabilities())
    )


async def connect(editor):
    env = dict(os.environ)
    env["SWITCHBOARD_CONFIG"] = "/dev/null"
    return spawn_agent_process(
        editor,
        os.environ["SWITCHBOARD_BIN"],
        "acp",
        "--agent",
        "test",
        env=env,
        use_unstable_protocol=True,
    )


def options_of(resp):
    return {o.root.id if hasattr(o, "root") else o.id: o for o in (resp.config_options or [])}


def current(option):
    o = option.root if hasattr(option, "root") else option
    return o.current_value


async def main_phase():
    ws = os.environ["WS"]
    ed = Editor()
    async with await connect(ed) as (conn, _proc):
        init = await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=caps()), WAIT)
        sc = init.agent_capabilities.session_capabilities
        check(init.agent_capabilities.load_session, "loadSession advertised")
        for cap in ("list", "resume", "close", "delete"):
            check(getattr(sc, cap) is not None, f"sessionCapabilities.{cap} advertised")

        # A session of the built-in agent: config options mode and model.
        b = await asyncio.wait_for(conn.new_session(cwd=ws, switchboard={"backend": "builtin"}), WAIT)
        opts = options_of(b)
        check(set(opts) == {"mode", "model"}, f"mode and model options, got {sorted(opts)}")
        r = await asyncio.wait_for(conn.prompt(session_id=b.session_id, prompt=[text_block("hello")]), WAIT)
        check(r.stop_reason == "end_turn", f"end_turn, got {r.stop_reason}")
        usage = ed.of(b.session_id, "usage_update")
        check(usage, "a usage_update after the turn")
        check(usage[-1].cost is not None and usage[-1].cost.amount > 0, f"a cost, got {usage[-1]}")
        check(usage[-1].cost.currency == "USD", "in USD")
        check(usage[-1].used > 0, "tokens in context")
        info = ed.of(b.session_id, "session_info_update")
        check(info and info[-1].title, f"a session_info_update with a title, got {info}")

        resp = await asyncio.wait_for(
            conn.set_config_option(session_id=b.session_id, config_id="mode", value="read-only"), WAIT
        )
        check(current(options_of(resp)["mode"]) == "read-only", "mode option now read-only")
        modes = ed.of(b.session_id, "current_mode_update")
        check(modes and modes[-1].current_mode_id == "read-only", "current_mode_update read-only")
        check(ed.of(b.session_id, "config_option_update"), "config_option_update sent")
        resp = await asyncio.wait_for(
            conn.set_config_option(session_id=b.session_id, config_id="model", value="mock-model-b"), WAIT
        )
        check(current(options_of(resp)["model"]) == "mock-model-b", "model option now mock-model-b")
        try:
            await conn.set_config_option(session_id=b.session_id, config_id="colour", value="red")
            check(False, "an unknown option is refused")
        except acp.RequestError as e:
            check(e.code == -32602, f"invalid params for an unknown option, got {e.code}")

        # A session of the test agent: a call denied with a reason from a form.
        t = await asyncio.wait_for(conn.new_session(cwd=ws), WAIT)
        check(set(options_of(t)) == {"mode"}, "an ACP agent's session has the mode option only")
        ed.choice, ed.reason = "deny-with-reason", "not on main"
        r = await asyncio.wait_for(conn.prompt(session_id=t.session_id, prompt=[text_block("[tool]")]), WAIT)
        check(r.stop_reason == "end_turn", f"end_turn after the denial, got {r.stop_reason}")
        check(ed.asked and "deny-with-reason" in ed.asked[-1], f"deny-with-reason offered, got {ed.asked}")
        check(len(ed.forms) == 1, f"one form asked, got {len(ed.forms)}")

        # The agent's own question comes as its form, and the values reach the agent.
        before = len(ed.of(t.session_id, "agent_message_chunk"))
        asked = len(ed.asked)
        r = await asyncio.wait_for(conn.prompt(session_id=t.session_id, prompt=[text_block("[elicit]")]), WAIT)
        check(r.stop_reason == "end_turn", f"end_turn after the question, got {r.stop_reason}")
        check(len(ed.forms) == 2, f"the question asked as a form, got {len(ed.forms)} forms")
        mode = ed.forms[-1][1]
        fields = (mode.root if hasattr(mode, "root") else mode).requested_schema.properties
        check({"branch", "force"} <= set(fields), f"the agent's fields, got {sorted(fields)}")
        check(len(ed.asked) == asked, "no permission request for a question")
        said = "".join(u.content.text for u in ed.of(t.session_id, "agent_message_chunk")[before:])
        check('answer: accept {"branch":"from-editor","force":false}' in said, f"the agent got the values, said {said!r}")

        # session/list: the cwd filter.
        listed = await asyncio.wait_for(conn.list_sessions(cwd=ws), WAIT)
        ids = {s.session_id for s in listed.sessions}
        check({b.session_id, t.session_id} <= ids, f"both sessions listed in {ws}")
        check(all(s.cwd == ws for s in listed.sessions), "only sessions in that cwd")
        other = await asyncio.wait_for(conn.list_sessions(cwd="/nonexistent-dir"), WAIT)
        check(not other.sessions, "no session in another cwd")

        # close: not followed here any more; a prompt is refused until it is resumed.
        await asyncio.wait_for(conn.close_session(session_id=t.session_id), WAIT)
        try:
            await conn.prompt(session_id=t.session_id, prompt=[text_block("still there?")])
            check(False, "a prompt to a closed session is refused")
        except acp.RequestError as e:
            check(e.code == -32002, f"resource not found for a closed session, got {e.code}")
        before = len(ed.updates)
        res = await asyncio.wait_for(conn.resume_session(session_id=t.session_id, cwd=ws), WAIT)
        check(res.modes is not None, "resume answers the modes")
        await asyncio.sleep(0.5)
        replayed = [u for (s, u) in ed.updates[before:] if s == t.session_id and u.session_update.endswith("message_chunk")]
        check(not replayed, f"resume replays nothing, got {len(replayed)} chunks")
        r = await asyncio.wait_for(conn.prompt(session_id=t.session_id, prompt=[text_block("again")]), WAIT)
        check(r.stop_reason == "end_turn", "a prompt after resume ends")

        # delete (the SDK has no helper for it: the raw request).
        d = await asyncio.wait_for(conn.new_session(cwd=ws), WAIT)
        await asyncio.wait_for(conn._conn.send_request("session/delete", {"sessionId": d.session_id}), WAIT)
        listed = await asyncio.wait_for(conn.list_sessions(cwd=ws), WAIT)
        check(d.session_id not in {s.session_id for s in listed.sessions}, "a deleted session is not listed")
        print(json.dumps({"builtin": b.session_id, "tool": t.session_id, "deleted": d.session_id}), flush=True)


async def resume_phase(session):
    ed = Editor()
    async with await connect(ed) as (conn, _proc):
        await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=caps()), WAIT)
        await asyncio.wait_for(conn.resume_session(session_id=session, cwd=os.environ["WS"]), WAIT)
        r = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[text_block("after the restart")]), WAIT)
        check(r.stop_reason == "end_turn", "a prompt after the restart ends")
        check(ed.of(session, "agent_message_chunk"), "the agent answered after the restart")
        print(json.dumps({"resumed": session}), flush=True)


async def remote_phase(kind):
    """The SDK's remote transports against `/v1/acp`: `http` (streamable HTTP: POSTs and
    the connection's and sessions' event streams) or `ws` (the WebSocket on the same
    endpoint). A session made, a call allowed, the session listed and closed."""
    url = os.environ["ACP_URL"] + "?agent=test"
    headers = {"Authorization": f"Bearer {os.environ['SWITCHBOARD_TOKEN']}"}
    if kind == "http":
        from acp.http import create_http_stream

        transport = create_http_stream(url, headers=headers)
    else:
        from acp.ws import create_websocket_stream

        transport = await create_websocket_stream(url.replace("http", "ws", 1), headers=headers)
    ed = Editor()
    conn = acp.connect_to_agent(ed, transport, use_unstable_protocol=True)
    ws = os.environ["WS"]
    try:
        init = await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=caps()), WAIT)
        check(init.agent_capabilities.session_capabilities.resume is not None, "capabilities over the wire")
        s = await asyncio.wait_for(conn.new_session(cwd=ws), WAIT)
        r = await asyncio.wait_for(conn.prompt(session_id=s.session_id, prompt=[text_block("[tool]")]), WAIT)
        check(r.stop_reason == "end_turn", f"end_turn, got {r.stop_reason}")
        check(ed.asked and ed.asked[-1][0] == "allow", f"the permission request came, got {ed.asked}")
        chunks = "".join(u.content.text for u in ed.of(s.session_id, "agent_message_chunk"))
        check("The tool ran." in chunks, f"the reply streamed, got {chunks!r}")
        listed = await asyncio.wait_for(conn.list_sessions(cwd=ws), WAIT)
        check(s.session_id in {x.session_id for x in listed.sessions}, "listed")
        await asyncio.wait_for(conn.close_session(session_id=s.session_id), WAIT)
        # Resumed on the same connection, and prompted again: its stream still carries it.
        await asyncio.wait_for(conn.resume_session(session_id=s.session_id, cwd=ws), WAIT)
        r = await asyncio.wait_for(conn.prompt(session_id=s.session_id, prompt=[text_block("again")]), WAIT)
        check(r.stop_reason == "end_turn", f"a prompt after resume over {kind}, got {r.stop_reason}")
        # A session this connection never opened: loaded (its history replayed), prompted.
        other = os.environ.get("OTHER_SESSION")
        if other:
            await asyncio.wait_for(conn.load_session(session_id=other, cwd=ws), WAIT)
            replayed = ed.of(other, "user_message_chunk")
            check(replayed, f"the history of {other} replayed over {kind}")
            r = await asyncio.wait_for(conn.prompt(session_id=other, prompt=[text_block("hi")]), WAIT)
            check(r.stop_reason == "end_turn", f"a prompt after load over {kind}, got {r.stop_reason}")
        print(json.dumps({"session": s.session_id}), flush=True)
    finally:
        await conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "main":
        asyncio.run(main_phase())
    elif sys.argv[1] in ("http", "ws"):
        asyncio.run(remote_phase(sys.argv[1]))
    else:
        asyncio.run(resume_phase(sys.argv[2]))
