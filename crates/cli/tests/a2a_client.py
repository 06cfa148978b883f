"""The official A2A Python SDK (PyPI: a2a-sdk 1.3) as a client of Switchboard's A2A
server: the Agent Card, a blocking send, a streaming send that stops at an approval
(input-required) answered on the task, a denial, get, cancel with a subscriber, the push
notification configs, and a push notification received by a webhook.

Run by crates/cli/tests/hub_acp/a2a.rs with A2A_BASE and TOKEN set; prints one JSON line.
Every check fails the script with a message.
"""

import asyncio
import json
import os
import socket
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)

WAIT = 60
RECEIVED = []


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        RECEIVED.append({"token": self.headers.get("X-A2A-Notification-Token"), "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def msg(text, task_id="", context_id=""):
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
                   task_id=task_id, context_id=context_id)


def reply_of(task):
    return "".join(p.text for a in task.artifacts if a.artifact_id == "reply" for p in a.parts)


async def last_task(client, req):
    """The task a blocking send answers."""
    task = None
    async for ev in client.send_message(req):
        if ev.HasField("task"):
            task = ev.task
    check(task is not None, "a task answered")
    return task


async def main():
    base, token = os.environ["A2A_BASE"], os.environ["TOKEN"]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    hook = ThreadingHTTPServer(("127.0.0.1", port), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    webhook = f"http://127.0.0.1:{port}/hook"

    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=WAIT)
    streaming = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(base)
    blocking = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(base)
    out = {}

    # A blocking send to the built-in agent (the skill in metadata): completed, the reply an artifact.
    req = SendMessageRequest(message=msg("hello over A2A"))
    req.metadata.update({"skill": "builtin"})
    task = await asyncio.wait_for(last_task(blocking, req), WAIT)
    check(task.status.state == TaskState.TASK_STATE_COMPLETED, f"completed, got {task.status}")
    check(reply_of(task), f"a reply artifact, got {task}")
    out["builtin_context"] = task.context_id

    # A streaming send to the test agent that needs an approval: the stream stops at
    # input-required; the answer on the task allows the call; a push config on the send.
    req = SendMessageRequest(
        message=msg("[tool]"),
        configuration=SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=webhook, token="hook-secret")
        ),
    )
    req.metadata.update({"skill": "test"})
    kinds, states, task_id, context_id = [], [], "", ""
    async for ev in streaming.send_message(req):
        kind = ev.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task":
            task_id, context_id = ev.task.id, ev.task.context_id
        if kind == "status_update":
            states.append(TaskState.Name(ev.status_update.status.state))
    check(kinds[0] == "task", f"the stream starts with the task, got {kinds}")
    check(states[-1] == "TASK_STATE_INPUT_REQUIRED", f"the stream stops at input-required, got {states}")
    task = await asyncio.wait_for(streaming.get_task(GetTaskRequest(id=task_id)), WAIT)
    asked = "".join(p.text for p in task.status.message.parts)
    check("Approve" in asked, f"the status message says what is asked, got {asked!r}")
    task = await asyncio.wait_for(last_task(blocking, SendMessageRequest(message=msg("allow", task_id, context_id))), WAIT)
    check(task.status.state == TaskState.TASK_STATE_COMPLETED, f"completed after allow, got {task.status}")
    check("The tool ran." in reply_of(task), f"the tool ran, got {reply_of(task)!r}")
    out["allowed"] = task_id

    # The same context again: a denial with a reason.
    task = await asyncio.wait_for(last_task(blocking, SendMessageRequest(message=msg("[tool]", "", context_id))), WAIT)
    check(task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, f"input required, got {task.status}")
    check(task.context_id == context_id, "the same context")
    task = await asyncio.wait_for(last_task(blocking, SendMessageRequest(message=msg("deny: not on main", task.id, context_id))), WAIT)
    check("The tool was rejected." in reply_of(task), f"rejected, got {reply_of(task)!r}")
    out["denied"] = task.id

    # Cancel: a slow run, returned at once, followed by a subscriber, canceled.
    req = SendMessageRequest(message=msg("[slow]", "", context_id),
                             configuration=SendMessageConfiguration(return_immediately=True))
    task = await asyncio.wait_for(last_task(blocking, req), WAIT)
    slow = task.id
    seen = []

    async def follow():
        async for ev in streaming.subscribe(SubscribeToTaskRequest(id=slow)):
            if ev.HasField("status_update"):
                seen.append(TaskState.Name(ev.status_update.status.state))

    sub = asyncio.create_task(follow())
    for _ in range(100):
        t = await streaming.get_task(GetTaskRequest(id=slow))
        if t.status.state == TaskState.TASK_STATE_WORKING:
            break
        await asyncio.sleep(0.1)
    # A task queued behind the slow run (same context): canceled at once.
    queued = await asyncio.wait_for(last_task(blocking, SendMessageRequest(
        message=msg("after the slow one", "", context_id),
        configuration=SendMessageConfiguration(return_immediately=True))), WAIT)
    t0 = asyncio.get_running_loop().time()
    task = await asyncio.wait_for(streaming.cancel_task(CancelTaskRequest(id=queued.id)), WAIT)
    check(task.status.state == TaskState.TASK_STATE_CANCELED, f"the queued task canceled, got {task.status}")
    check(asyncio.get_running_loop().time() - t0 < 10, "at once")
    task = await asyncio.wait_for(streaming.cancel_task(CancelTaskRequest(id=slow)), WAIT)
    check(task.status.state == TaskState.TASK_STATE_CANCELED, f"canceled, got {task.status}")
    await asyncio.wait_for(sub, WAIT)
    check(seen and seen[-1] == "TASK_STATE_CANCELED", f"the subscriber saw the cancel, got {seen}")
    try:
        await streaming.cancel_task(CancelTaskRequest(id=slow))
        check(False, "a finished task cannot be canceled")
    except Exception as e:  # TaskNotCancelableError
        check("cancel" in type(e).__name__.lower() or "-32002" in str(e), f"not cancelable, got {e!r}")

    # Push notification configs of a task.
    cfg = await streaming.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=slow, id="cfg-1", url=webhook, token="t2"))
    check(cfg.id == "cfg-1", f"created, got {cfg}")
    got = await streaming.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=slow, id="cfg-1"))
    check(got.url == webhook, f"read back, got {got}")
    check(got.token == "[redacted]", f"its secret is not answered, got {got.token!r}")
    listed = await streaming.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=slow))
    check([c.id for c in listed.configs] == ["cfg-1"], f"listed, got {listed}")
    await streaming.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=slow, id="cfg-1"))
    listed = await streaming.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=slow))
    check(not listed.configs, "deleted")

    # An unknown task.
    try:
        await streaming.get_task(GetTaskRequest(id="00000000-0000-7000-8000-000000000000.00000000-0000-7000-8000-000000000001"))
        check(False, "an unknown task is not found")
    except Exception as e:
        check("notfound" in type(e).__name__.lower() or "-32001" in str(e), f"not found, got {e!r}")

    # The webhook got the allowed task's notifications, with its token.
    for _ in range(100):
        done = [r for r in RECEIVED if r["body"].get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED"]
        if done:
            break
        await asyncio.sleep(0.1)
    check(done, f"a push notification of the completed task, got {RECEIVED}")
    check(all(r["token"] == "hook-secret" for r in RECEIVED), "each with the config's token")
    check(done[0]["body"]["statusUpdate"]["taskId"] == out["allowed"], "of that task")
    out["pushed"] = len(RECEIVED)
    await streaming.close()
    await blocking.close()
    await http.aclose()
    hook.shutdown()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
