#!/usr/bin/env python3
"""What the delivery ledger adds to taking an inbound chat message, in SQL alone.

Replays `GatewayStore::take_inbound`'s transaction (mark seen, prune marks, take the chat's
context, queue the message) 5,000 times on a fresh `gateway.db` made by the real SQLite
migrations (WAL, synchronous = NORMAL, one commit per message), without and with the
ledger's INSERT, then again with the ledger's indexes dropped to show what they cost.
Python's sqlite3 module: absolute figures include the interpreter; the difference is the
ledger's. docs/benchmarks.md, "Delivery ledger". Run from the repository root:

    python3 scripts/ledger-cost.py
"""
import json
import os
import sqlite3
import statistics
import tempfile
import time

MIGRATIONS = "crates/gateway/migrations/sqlite"
INDEXES = ["ledger_chat", "ledger_message", "ledger_inbox", "ledger_run", "ledger_status", "ledger_updated"]
CHAT = json.dumps({"id": "42", "kind": "direct"})
PEER = json.dumps({"id": "42", "name": "Alice"})
TEXT = "hello there, a message of some length " * 3
T = "2026-12-07T00:00:00.000000Z"


def setup(path, indexes):
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    for m in sorted(os.listdir(MIGRATIONS)):
        c.executescript(open(os.path.join(MIGRATIONS, m)).read())
    if not indexes:
        for ix in INDEXES:
            c.execute(f"DROP INDEX {ix}")
    return c


def run(with_ledger, indexes=True, n=5000):
    c = setup(os.path.join(tempfile.mkdtemp(), "gateway.db"), indexes)
    t0 = time.perf_counter()
    for i in range(n):
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            "INSERT INTO seen (channel, chat_id, message_id, seen_at) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
            ("telegram", "42", str(i), T),
        )
        c.execute("DELETE FROM seen WHERE seen_at < ?", ("2026-12-05T00:00:00Z",))
        c.execute(
            "DELETE FROM contexts WHERE channel = ? AND target = ? RETURNING context, expires_at",
            ("telegram", "42"),
        ).fetchall()
        inbox_id = c.execute(
            "INSERT INTO inbox (routing_key, channel, peer, chat, text, context, created_at, attachments) "
            "VALUES (?,?,?,?,?,?,?,?) RETURNING id",
            ("k", "telegram", PEER, CHAT, TEXT, None, T, None),
        ).fetchone()[0]
        if with_ledger:
            c.execute(
                "INSERT INTO ledger (channel, chat_id, chat, peer, message_id, kind, text, attachments, status, "
                "routing_key, inbox_id, received_at, updated_at) "
                "VALUES (?,?,?,?,?,'message',?,?,'queued',?,?,?,?)",
                ("telegram", "42", CHAT, PEER, str(i), TEXT, None, "k", inbox_id, T, T),
            )
        c.execute("COMMIT")
    return (time.perf_counter() - t0) / n * 1e6


for label, indexes in [("with the ledger's indexes", True), ("without them", False)]:
    added = []
    for _ in range(5):
        without, with_ = run(False, indexes), run(True, indexes)
        added.append(with_ - without)
        print(f"{label}: take_inbound {without:.1f} µs, with the ledger {with_:.1f} µs (+{with_ - without:.1f})")
    print(f"{label}: median added {statistics.median(added):.1f} µs per message")
