"""RocketMQ's mqadmin for rmqcore: topics, consumer groups, offsets and dead letters, on a store directory
(``--store DIR``: the broker is opened here, taking the store's lock) or on a running server (``--server URL``:
through the console's JSON API, docs/console-api.md). Both run the same operations (rmqcore.console.data), so
they answer the same JSON.

    rmqcore topic list|show|create|delete     (mqadmin topicList, topicStatus, updateTopic, deleteTopic)
    rmqcore group list|show|create|delete     (consumerProgress, updateSubGroup, deleteSubGroup)
    rmqcore group reset-offset GROUP --time T (resetOffsetByTime)
    rmqcore dlq resend COMMITLOG_OFFSET       (the dashboard's DLQ resend)
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

PERMS = {"RW": 6, "R": 4, "W": 2, "-": 0, "6": 6, "4": 4, "2": 2, "0": 0}


class AdminError(Exception):
    """A refusal, from the server (its message) or from the local broker; printed as one line, exit 2."""


class RemoteAdmin:
    """The console's JSON API at ``url`` (stdlib HTTP; ``user`` "AK:SK" for HTTP Basic)."""

    def __init__(self, url: str, user: str | None = None, timeout: float = 30.0):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise AdminError(f"--server: expected http://HOST:PORT, got {url!r}")
        self.base = url.rstrip("/") + "/api/v1"
        self.auth = ("Basic " + base64.b64encode(user.encode()).decode()) if user else None
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.auth:
            headers["Authorization"] = self.auth
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error") or e.reason
            except ValueError:
                message = e.reason
            raise AdminError(f"{e.code}: {message}") from None
        except urllib.error.URLError as e:
            raise AdminError(f"cannot reach {self.base}: {e.reason}") from None

    def topics(self, q="", offset=0, limit=200, system=False):
        return self._call("GET", "/topics", query={"q": q, "offset": offset, "limit": limit,
                                                   "system": "1" if system else ""})

    def topic(self, name):
        return self._call("GET", "/topics/" + urllib.parse.quote(name, safe=""))

    def update_topic(self, body):
        return self._call("POST", "/topics", body)

    def delete_topic(self, name):
        return self._call("DELETE", "/topics/" + urllib.parse.quote(name, safe=""))

    def groups(self, q="", offset=0, limit=200, system=False):
        return self._call("GET", "/groups", query={"q": q, "offset": offset, "limit": limit,
                                                   "system": "1" if system else ""})

    def group(self, name):
        return self._call("GET", "/groups/" + urllib.parse.quote(name, safe=""))

    def update_group(self, body):
        return self._call("POST", "/groups", body)

    def delete_group(self, name):
        return self._call("DELETE", "/groups/" + urllib.parse.quote(name, safe=""))

    def reset_offset(self, group, body):
        return self._call("POST", f"/groups/{urllib.parse.quote(group, safe='')}/reset-offset", body)

    def resend_dlq(self, commitlog_offset):
        return self._call("POST", f"/messages/{commitlog_offset}/resend", {})


class _LocalHost:
    """The server object ConsoleData reads, over a broker opened here: no RPC, nothing in flight."""

    def __init__(self, broker):
        from .server.events import ServerEvents
        self.broker = broker
        self.events = ServerEvents()
        self.host, self.port, self.acl = "local", 0, None

    def inflight(self, group):
        return {}


@contextlib.contextmanager
def local_admin(store: str):
    """ConsoleData over the store at ``store``, opened as a Broker (its lock taken) for the command's time."""
    from .admin import check_store_path
    from .broker import Broker
    from .console.data import ConsoleData
    broker = Broker.open(check_store_path(store))
    try:
        yield ConsoleData(_LocalHost(broker))
    finally:
        broker.close()


@contextlib.contextmanager
def open_admin(args):
    if args.server:
        yield RemoteAdmin(args.server, args.user)
    else:
        with local_admin(args.store) as admin:
            yield admin


# ------------------------------------------------------------------------------------------------- commands
def _table(rows: list[list[Any]], header: list[str], out) -> None:
    from .cli import table
    table(rows, header, out)


def _emit(obj, out) -> None:
    json.dump(obj, out, indent=2, default=str)
    out.write("\n")


def _run(args, op):
    from .console.data import ConsoleError
    from .errors import RmqStoreError
    try:
        with open_admin(args) as admin:
            return op(admin)
    except ConsoleError as e:
        raise AdminError(str(e)) from None
    except RmqStoreError as e:
        raise AdminError(f"{type(e).__name__}: {e}") from None


def topic_cmd(args, out=sys.stdout) -> int:
    if args.action == "list":
        r = _run(args, lambda a: a.topics(args.q or "", 0, 200, args.system))
        if args.json:
            _emit(r, out)
        else:
            _table([[t["topic"], t["message_type"], f"{t['read_queue_nums']}/{t['write_queue_nums']}", t["perm"],
                     t["messages"]] for t in r["items"]], ["topic", "type", "queues r/w", "perm", "messages"], out)
        return 0
    if args.action == "show":
        _emit(_run(args, lambda a: a.topic(args.name)), out)
        return 0
    if args.action == "delete":
        _emit(_run(args, lambda a: a.delete_topic(args.name)), out)
        return 0
    body: dict[str, Any] = {"topic": args.name}
    if args.queues is not None:
        body["queue_nums"] = args.queues
    if args.read_queues is not None:
        body["read_queue_nums"] = args.read_queues
    if args.write_queues is not None:
        body["write_queue_nums"] = args.write_queues
    if args.perm is not None:
        if args.perm.upper() not in PERMS:
            raise AdminError(f"--perm: expected RW, R, W or -, got {args.perm!r}")
        body["perm"] = PERMS[args.perm.upper()]
    if args.type is not None:
        body["message_type"] = args.type.upper()
    _emit(_run(args, lambda a: a.update_topic(body)), out)
    return 0


def group_cmd(args, out=sys.stdout) -> int:
    if args.action == "list":
        r = _run(args, lambda a: a.groups(args.q or "", 0, 200, args.system))
        if args.json:
            _emit(r, out)
        else:
            _table([[g["group"], ",".join(g["topics"]) or "-", g["lag"], g["inflight"], g["dlq_messages"],
                     "yes" if g["consume_enable"] else "no"] for g in r["items"]],
                   ["group", "topics", "lag", "in flight", "dlq", "enabled"], out)
        return 0
    if args.action == "show":
        _emit(_run(args, lambda a: a.group(args.name)), out)
        return 0
    if args.action == "delete":
        _emit(_run(args, lambda a: a.delete_group(args.name)), out)
        return 0
    if args.action == "reset-offset":
        body = {"timestamp": args.time, "topic": args.topic}
        _emit(_run(args, lambda a: a.reset_offset(args.name, body)), out)
        return 0
    body = {"group": args.name}
    if args.retry_max_times is not None:
        body["retry_max_times"] = args.retry_max_times
    if args.retry_queues is not None:
        body["retry_queue_nums"] = args.retry_queues
    if args.disable:
        body["consume_enable"] = False
    if args.enable:
        body["consume_enable"] = True
    _emit(_run(args, lambda a: a.update_group(body)), out)
    return 0


def dlq_cmd(args, out=sys.stdout) -> int:
    _emit(_run(args, lambda a: a.resend_dlq(args.offset)), out)
    return 0


def _target(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", metavar="DIR", help="a store directory (opened as a broker: not while it runs)")
    where.add_argument("--server", metavar="URL", help="a running server's console, e.g. http://127.0.0.1:8080")
    p.add_argument("--user", metavar="AK:SK", help="HTTP Basic account for --server (accessKey:secretKey)")


def add_commands(sub) -> None:
    """The topic, group and dlq commands on rmqcore's command line."""
    t = sub.add_parser("topic", help="list, show, create/update or delete topics (--store DIR or --server URL)")
    tsub = t.add_subparsers(dest="action", required=True, metavar="ACTION", help="list, show, create, delete")
    tl = tsub.add_parser("list", help="topics with their queues and message counts")
    tl.add_argument("-q", help="part of the name")
    tl.add_argument("--system", action="store_true", help="include system, retry and DLQ topics")
    tl.add_argument("--json", action="store_true", help="JSON instead of a table")
    ts = tsub.add_parser("show", help="a topic's queues and the groups consuming it (JSON)")
    ts.add_argument("name", help="the topic")
    tc = tsub.add_parser("create", help="create or update a topic (updateTopic)")
    tc.add_argument("name", help="the topic")
    tc.add_argument("--queues", type=int, help="read and write queues (default 4, or the topic's)")
    tc.add_argument("--read-queues", type=int, help="read queues (overrides --queues)")
    tc.add_argument("--write-queues", type=int, help="write queues (overrides --queues)")
    tc.add_argument("--perm", help="RW, R, W or -")
    tc.add_argument("--type", help="NORMAL, FIFO, DELAY or TRANSACTION")
    td = tsub.add_parser("delete", help="delete a topic's config and every group's offsets in it")
    td.add_argument("name", help="the topic")
    for p in (tl, ts, tc, td):
        _target(p)
        p.set_defaults(func=topic_cmd)

    g = sub.add_parser("group", help="list, show, create/update, delete consumer groups; reset their offsets")
    gsub = g.add_subparsers(dest="action", required=True, metavar="ACTION",
                            help="list, show, create, delete, reset-offset")
    gl = gsub.add_parser("list", help="groups with their lag, in-flight and DLQ counts")
    gl.add_argument("-q", help="part of the name")
    gl.add_argument("--system", action="store_true", help="include system groups")
    gl.add_argument("--json", action="store_true", help="JSON instead of a table")
    gs = gsub.add_parser("show", help="a group's lag per queue, clients, retry and DLQ counts (JSON)")
    gs.add_argument("name", help="the consumer group")
    gc = gsub.add_parser("create", help="create or update a group (updateSubGroup)")
    gc.add_argument("name", help="the consumer group")
    gc.add_argument("--retry-max-times", type=int, help="deliveries before the DLQ (default 16)")
    gc.add_argument("--retry-queues", type=int, help="queues of its retry topic (default 1)")
    onoff = gc.add_mutually_exclusive_group()
    onoff.add_argument("--disable", action="store_true", help="stop the group consuming")
    onoff.add_argument("--enable", action="store_true", help="let the group consume again")
    gd = gsub.add_parser("delete", help="delete a group's config and its offsets")
    gd.add_argument("name", help="the consumer group")
    gr = gsub.add_parser("reset-offset", help="move every queue to the first message stored at or after a time")
    gr.add_argument("name", help="the consumer group")
    gr.add_argument("--time", required=True, help="milliseconds since the epoch or ISO 8601 (UTC without zone)")
    gr.add_argument("--topic", help="only this topic (default: every topic the group has offsets in)")
    for p in (gl, gs, gc, gd, gr):
        _target(p)
        p.set_defaults(func=group_cmd)

    d = sub.add_parser("dlq", help="resend a dead letter to its group")
    dsub = d.add_subparsers(dest="action", required=True, metavar="ACTION", help="resend")
    dr = dsub.add_parser("resend", help="store a %%DLQ%% message again in its group's retry topic")
    dr.add_argument("offset", type=int, help="the dead letter's commitlog offset")
    _target(dr)
    dr.set_defaults(func=dlq_cmd)
