"""The official `openai` Python SDK against Switchboard's /v1/chat/completions, run by
crates/cli/tests/chat_completions.rs. Prints one JSON object with what it saw."""

import json
import os

import openai
from openai import OpenAI

base = os.environ["SB_URL"].rstrip("/") + "/v1"
c = OpenAI(base_url=base, api_key=os.environ["SB_TOKEN"], max_retries=0)
out = {"models": [m.id for m in c.models.list()]}

# Streamed, with a system prompt and an earlier turn, and usage at the end.
raw = c.chat.completions.with_raw_response.create(
    model="switchboard/builtin",
    messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "earlier question"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": "say hello"},
    ],
    stream=True,
    stream_options={"include_usage": True},
)
session = raw.headers["x-switchboard-session"]
text, finish, usage, chunks = "", None, None, 0
for chunk in raw.parse():
    chunks += 1
    if chunk.choices:
        if chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    if chunk.usage:
        usage = chunk.usage.total_tokens
out.update(session=session, streamed=text, finish=finish, usage=usage, chunks=chunks)

# The same conversation continued, unstreamed: by header, then by metadata.
r = c.chat.completions.create(
    model="switchboard/builtin",
    messages=[{"role": "user", "content": "and again"}],
    extra_headers={"X-Switchboard-Session": session},
)
out["second"] = r.choices[0].message.content
out["second_finish"] = r.choices[0].finish_reason
r = c.chat.completions.create(
    model="switchboard/builtin",
    messages=[{"role": "user", "content": "third"}],
    metadata={"session_id": session},
)
out["third"] = r.choices[0].message.content

# A tool call that needs approval is denied (the default policy); the model carries on.
r = c.chat.completions.with_raw_response.create(
    model="switchboard/builtin",
    messages=[{"role": "user", "content": "touch the file"}],
)
out["denied_session"] = r.headers["x-switchboard-session"]
out["denied"] = r.parse().choices[0].message.content

# Errors, in OpenAI's shape, raised as the SDK's exceptions.
try:
    c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
except openai.NotFoundError as e:
    out["unknown_model"] = {"status": e.status_code, "code": e.code, "type": e.type}
try:
    OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    out["bad_token"] = {"status": e.status_code, "code": e.code}
try:
    c.chat.completions.create(
        model="switchboard/builtin",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"X-Switchboard-Session": "00000000-0000-7000-8000-000000000000"},
    )
except openai.NotFoundError as e:
    out["unknown_session"] = {"status": e.status_code, "code": e.code}
print(json.dumps(out))
