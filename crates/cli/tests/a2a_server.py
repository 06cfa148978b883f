"""A small A2A v1.0 agent server built with the official A2A Python SDK (PyPI: a2a-sdk 1.3),
the remote agent behind Switchboard's A2A backend in its tests.

Run by crates/cli/tests/common/a2a_agent.rs for the A2A backend tests (hub_acp/a2a_backend.rs,
relay.rs). It serves,
on 127.0.0.1 and a port the OS picks:
  - the Agent Card at /.well-known/agent-card.json ("sdk-agent", streaming, one JSON-RPC
    interface at http://127.0.0.1:PORT/rpc, protocol version 1.0), without auth;
  - the JSON-RPC binding at /rpc through the SDK's default request handler and an in-memory
    task store; each request must carry `Authorization: Bearer $A2A_TOKEN` (else HTTP 401)
    and, as the SDK requires for 1.0, `A2A-Version: 1.0`.
When it listens it prints `READY <port>` on stdout; it serves until killed.

With A2A_NO_STREAMING=1 the card says the agent does not stream (and the SDK then refuses
SendStreamingMessage): what a client must fall back from.

$A2A_LOG names a file that gets one JSON line per message the executor receives:
  {"text", "context_id", "task_id", "message_task_id", "files": [{"name", "media_type",
   "size"}], "auth"}
and one line {"cancelled": <task id>} per cancel that reaches the executor.

What the agent does, by the (case-insensitive) text of the message; a message that continues a
task waiting in input-required is answered first, whatever its text:
  hello    working; an artifact "reply" in two chunks, "Hello from " then "the SDK agent."
           (append, last chunk; plus " Got N file(s)." when the message carried files),
           100 ms apart; completed
  remember completed, artifact text "context <context id>"
  ask      input-required, the status message "Which colour?"; the answer on the task
           completes it with "You chose <answer>"
  slow     working, then up to 60 s of sleep; a cancel sets it canceled
  fail     failed, the status message "the SDK agent failed on purpose"
  file     completed, an artifact with the file table.csv (text/csv) and a text part
  else     completed, artifact text "echo: <text>"
"""

import asyncio
import contextlib
import json
import os
import socket
import sys
import uuid

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.helpers import new_task
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse

TOKEN = os.environ.get("A2A_TOKEN", "")
LOG = os.environ.get("A2A_LOG", "")
SLOW_SECONDS = 60


def log(entry):
    """Appends one JSON line to $A2A_LOG, flushed at once."""
    if not LOG:
        return
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def text_part(text):
    return Part(text=text)


class TaskIdRecorder(SimpleRequestContextBuilder):
    """The default context builder, also noting the task id the client sent (the SDK fills a
    generated one into the message before the executor sees it)."""

    async def build(self, context, params=None, task_id=None, context_id=None, task=None):
        context.state["message_task_id"] = task_id or ""
        return await super().build(context=context, params=params, task_id=task_id,
                                    context_id=context_id, task=task)


class SdkAgent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task = context.current_task
        # A message naming its task but no context gets a fresh context id from the SDK;
        # the task's own context is the one that counts.
        context_id = task.context_id if task is not None else context.context_id
        text = "".join(p.text for p in message.parts if p.HasField("text"))
        files = [p for p in message.parts if p.HasField("raw") or p.HasField("url")]
        headers = context.call_context.state.get("headers", {})
        log({
            "text": text,
            "context_id": context_id,
            "task_id": context.task_id,
            "message_task_id": context.call_context.state.get("message_task_id", ""),
            "files": [{"name": p.filename, "media_type": p.media_type, "size": len(p.raw)} for p in files],
            "auth": headers.get("authorization", ""),
        })

        if task is None:
            # A new task: the SDK wants the Task itself before any update on it.
            await event_queue.enqueue_event(
                new_task(context.task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=[message]))
        updater = TaskUpdater(event_queue, context.task_id, context_id)
        lower = text.lower()

        async def reply(*parts):
            await updater.add_artifact(list(parts), name="reply", last_chunk=True)
            await updater.complete()

        if task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.start_work()
            await reply(text_part("You chose " + text))
        elif "hello" in lower:
            await updater.start_work()
            artifact_id = str(uuid.uuid4())
            await updater.add_artifact([text_part("Hello from ")], artifact_id=artifact_id, name="reply",
                                       append=False, last_chunk=False)
            await asyncio.sleep(0.1)
            rest = "the SDK agent."
            if files:
                rest += f" Got {len(files)} file(s)."
            await updater.add_artifact([text_part(rest)], artifact_id=artifact_id, name="reply",
                                       append=True, last_chunk=True)
            await updater.complete()
        elif "remember" in lower:
            await reply(text_part("context " + context_id))
        elif "ask" in lower:
            await updater.requires_input(updater.new_agent_message([text_part("Which colour?")]))
        elif "slow" in lower:
            await updater.start_work()
            for _ in range(SLOW_SECONDS * 10):
                await asyncio.sleep(0.1)
            await reply(text_part("slow done"))
        elif "fail" in lower:
            await updater.start_work()
            await updater.failed(updater.new_agent_message([text_part("the SDK agent failed on purpose")]))
        elif "file" in lower:
            await reply(
                Part(raw=b"col1,col2\n1,2\n", filename="table.csv", media_type="text/csv"),
                text_part("here is the table"),
            )
        else:
            await reply(text_part("echo: " + text))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The SDK awaits this first, then cancels the running execute().
        log({"cancelled": context.task_id})
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class BearerAuth:
    """ASGI middleware: everything under /rpc needs `Authorization: Bearer $A2A_TOKEN`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and TOKEN and scope["path"].startswith("/rpc"):
            got = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if got != f"Bearer {TOKEN}":
                response = JSONResponse({"error": "unauthorized"}, status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def agent_card(port):
    return AgentCard(
        name="sdk-agent",
        description="A test agent built with the A2A Python SDK.",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}/rpc",
                                             protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=os.environ.get("A2A_NO_STREAMING") != "1"),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="test", name="test", description="Answers by the words in a message.",
                           tags=["test"])],
    )


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    card = agent_card(port)
    handler = DefaultRequestHandler(agent_executor=SdkAgent(), task_store=InMemoryTaskStore(),
                                    agent_card=card, request_context_builder=TaskIdRecorder())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await handler.aclose()

    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/rpc"),
                    lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(BearerAuth(app), log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=1))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving
            sys.exit("the server did not start")
        await asyncio.sleep(0.02)
    print(f"READY {port}", flush=True)
    await serving


if __name__ == "__main__":
    asyncio.run(main())
