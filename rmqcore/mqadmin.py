"""RocketMQ's mqadmin for rmqcore, the parts the command line (cli.py: topic, group, dlq) shares between a store
directory (STORE: the broker is opened there, taking the store's lock) and a running server (``--server URL``:
through the console's JSON API, docs/console-api.md):

- the views (rmqcore.admin_views ``topic_view`` / ``group_view``) are one topic's or group's config as both answer
  it (the console's JSON carries the same dict as ``config``), so ``--json`` output is the same either way;
- ``RemoteAdmin``: the JSON API's calls; ``local_admin``: the console's operations (rmqcore.console.data) over a
  store directory, for what only the console computes (show, reset-offset, dlq resend).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

from .admin_views import EXIT_OK, group_view, not_found, table, topic_view
from .admin_views import emit_json as _emit_json



class AdminError(Exception):
    """A refusal, from the server (its message) or from the local broker; printed as one line, exit 2."""


class NotFoundError(AdminError):
    """The topic, group or message the command names does not exist (the console's NotFound, a server's 404): one
    line in the same words from a store and through a server (admin_views.not_found), exit 1 as ``get`` and
    ``query`` finding nothing."""


class RemoteAdmin:
    """The console's JSON API at ``url`` (stdlib HTTP; ``user`` "AK:SK" for HTTP Basic)."""

    def __init__(self, url: str, user: str | None = None, timeout: float = 30.0):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise AdminError(f"--server: expected http://HOST:PORT, got {url!r}")
        self.base = url.rstrip("/") + "/api/v1"
        self.auth = ("Basic " + base64.b64encode(user.encode()).decode()) if user else None
        self.timeout = timeout
        self._token = None

    def _call(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        headers = {"Accept": "application/json"}
        if method != "GET":
            # Every change carries the console's token (docs/console-api.md), read once from the session.
            if self._token is None:
                session = self._call("GET", "/session")
                self._token = (session["csrf_header"], session["csrf_token"])
            headers[self._token[0]] = self._token[1]
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
                message = json.loads(e.read()).get("error")
            except (ValueError, AttributeError):
                message = None
            if e.code == 404 and message:       # the console's NotFound (a bare 404 is a wrong URL: exit 2)
                raise NotFoundError(message) from None
            raise AdminError(f"{e.code}: {message or e.reason}") from None
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

    def send_message(self, body):
        return self._call("POST", "/messages", body)

    def consume(self, group, body):
        return self._call("POST", f"/groups/{urllib.parse.quote(group, safe='')}/consume", body)

    def broker_config(self):
        return self._call("GET", "/broker/config")

    def update_broker_config(self, body):
        return self._call("POST", "/broker/config", body)

    def connections(self, group="", topic=""):
        return self._call("GET", "/connections", query={"group": group, "topic": topic})


class _LocalHost:
    """The server object ConsoleData reads, over a broker opened here: no RPC, nothing in flight."""

    def __init__(self, broker):
        from .serve.events import ServerEvents
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
    """RemoteAdmin for ``--server``, else the console's operations over STORE (same methods, same answers)."""
    if args.server:
        yield RemoteAdmin(args.server, args.user)
    else:
        with local_admin(args.store) as admin:
            yield admin


def run_admin(op):
    """``op()`` with the console's and the store's refusals as AdminError (one line, exit 2)."""
    from .console.data import ConsoleError
    from .errors import RmqStoreError
    try:
        return op()
    except ConsoleError as e:
        raise (NotFoundError if e.status == 404 else AdminError)(str(e)) from None
    except RmqStoreError as e:
        raise AdminError(f"{type(e).__name__}: {e}") from None


# -- the commands ------------------------------------------------------------------------------------------------
# On a store no server holds (STORE: the broker is opened here, its lock taken) or on a running server (--server URL:
# its console's JSON API); both answer with the same views (admin_views.topic_view / group_view).

MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


def _admin_broker(args: argparse.Namespace, create: bool = False):
    """A Broker over STORE for one admin change: the store's lock is taken (a running server holds it: the command
    fails with one line), the schedule and timer services stay off (an admin command delivers nothing), and
    --config's broker.conf gives the broker's name and switches, so the system topics written are the server's."""
    from .admin import check_store_path
    from .broker import Broker, BrokerConfig
    from .config import StoreConfig
    path = os.path.abspath(args.store) if create else check_store_path(args.store)
    broker_config, store_config = BrokerConfig(), StoreConfig()
    if args.config:
        from .broker.broker_conf import load_broker_conf
        broker_config, store_config, unknown = load_broker_conf(args.config)
        if unknown:
            print(f"rmqcore {args.cmd}: warning: {args.config}: keys rmqcore does not use: {', '.join(unknown)}",
                  file=sys.stderr)
    store_config = store_config.replace(schedule_message_service_enable=False, timer_wheel_enable=False)
    return Broker.open(path, broker_config, store_config=store_config)


def _admin_target(args: argparse.Namespace):
    """None for STORE, else the RemoteAdmin of --server; refuses both or neither."""
    if args.server and args.store:
        raise AdminError("give STORE or --server URL, not both")
    if not args.server and not args.store:
        raise AdminError("give STORE (a store no server holds) or --server URL (a running server's console)")
    if args.server and getattr(args, "config", None):
        raise AdminError("--config is for STORE: a running server has its own broker.conf")
    return RemoteAdmin(args.server, args.user) if args.server else None


def _all_pages(fetch) -> list:
    items, offset = [], 0
    while True:
        page = fetch(offset)
        items += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            return items


def _console_view(args: argparse.Namespace, op, text) -> int:
    """show / reset-offset / dlq resend: what the console computes, over STORE or through --server; JSON with
    --json, else ``text(answer)``'s human lines."""
    remote = _admin_target(args)
    if remote is not None:
        answer = op(remote)
    else:
        with local_admin(args.store) as admin:
            answer = run_admin(lambda: op(admin))
    if args.json:
        _emit_json(answer, sys.stdout)
    else:
        text(answer, sys.stdout)
    return EXIT_OK


def _yes(flag) -> str:
    return "yes" if flag else "no"


def _topic_text(t: dict, out) -> None:
    print(f"topic {t['topic']}: {t.get('message_type') or '-'}, {t['read_queue_nums']} read / "
          f"{t['write_queue_nums']} write queues, perm {t.get('perm') or '-'}, {t['messages']:,} messages"
          f"{'' if t.get('configured', True) else ' (not in topics.json: only its stored queues)'}", file=out)
    if t["queues"]:
        table([(q["queue_id"], q["min_offset"], q["max_offset"], q["messages"], q["last_store_time"] or "-")
               for q in t["queues"]], ("queue", "min offset", "max offset", "messages", "last stored"), out)
    if t["groups"]:
        print("groups with offsets in it:", file=out)
        table([(g["group"], g["lag"]) for g in t["groups"]], ("group", "lag"), out)
    else:
        print("no group has offsets in it", file=out)


def _group_text(g: dict, out) -> None:
    c = g["config"]
    print(f"group {g['group']}: {'FIFO' if c['fifo'] else 'concurrent'}, max delivery attempts "
          f"{c['max_delivery_attempts']}, consume {'enabled' if g['consume_enable'] else 'disabled'}; lag "
          f"{g['lag']:,}, in flight {g['inflight']:,}; {g['retry_messages']:,} in {g['retry_topic']}, "
          f"{g['dlq_messages']:,} in {g['dlq_topic']}; {g['clients']} client(s) connected", file=out)
    if g["queues"]:
        table([(q["topic"], q["queue_id"], q["broker_offset"], q["consumer_offset"], q["lag"], q["inflight"],
                q["lag_since"] or "-") for q in g["queues"]],
              ("topic", "queue", "max offset", "committed", "lag", "in flight", "oldest unconsumed"), out)
    for cl in g.get("clients_detail", []):
        print(f"  client {cl['client_id']} ({cl['kind']}, {cl['language']} {cl['version']}) from {cl['address']}, "
              f"last seen {cl['last_seen']}", file=out)


def _reset_text(r: dict, out) -> None:
    print(f"group {r['group']}: offsets reset to the first message stored at or after {r['time']}", file=out)
    table([(q["topic"], q["queue_id"], q["old_offset"], q["new_offset"]) for q in r["queues"]],
          ("topic", "queue", "old offset", "new offset"), out)


def _resent_text(r: dict, out) -> None:
    print(f"resent the dead letter at {r['resent']} to {r['topic']} queue {r['queue_id']} for group {r['group']}: "
          f"commitlog offset {r['commitlog_offset']}, msg id {r['msg_id']}", file=out)


def topic_cmd(args: argparse.Namespace) -> int:
    action = args.topic_cmd
    if action == "show":
        return _console_view(args, lambda a: a.topic(args.name), _topic_text)
    if action == "create":
        from .broker.topic_validator import validate_topic
        validate_topic(args.name)         # before the store is opened (or made): a typo creates nothing
    remote = _admin_target(args)
    if remote is not None:
        if action == "create":
            body = {"topic": args.name, "queue_nums": args.queues}
            if args.type:
                body["message_type"] = args.type
            r = remote.update_topic(body)
            view, existed = r["topic"]["config"], not r["created"]
        elif action == "delete":
            remote.delete_topic(args.name)
        else:
            rows = [i["config"] for i in _all_pages(lambda o: remote.topics("", o, 200, args.all))]
    else:
        with _admin_broker(args, create=action == "create") as broker:
            if action == "create":
                existed = args.name in broker.topics()
                view = topic_view(broker.create_topic(args.name, args.queues, message_type=args.type), False)
            elif action == "delete":
                if args.name not in broker.topics():
                    raise NotFoundError(not_found("topic", args.name))
                broker.delete_topic(args.name)
            else:
                system = broker.topic_config_manager.system_topics
                rows = [topic_view(tc, name in system) for name, tc in sorted(broker.topics().items())
                        if args.all or name not in system]
    if action == "create":
        if args.json:
            _emit_json(view, sys.stdout)
        else:
            print(f"{'updated' if existed else 'created'} topic {view['name']}: {view['write_queue_nums']} queues, "
                  f"type {view['message_type']}")
    elif action == "delete":
        if args.json:
            _emit_json({"deleted": args.name}, sys.stdout)
        else:
            print(f"deleted topic {args.name} (its messages stay in the store until cleaned)")
    elif args.json:
        _emit_json(rows, sys.stdout)
    else:
        table([(r["name"], r["message_type"], r["read_queue_nums"], r["write_queue_nums"], r["perm_string"],
                "yes" if r["order"] else "-") for r in rows],
              ("topic", "type", "read", "write", "perm", "order"), sys.stdout)
    return EXIT_OK


def group_cmd(args: argparse.Namespace) -> int:
    action = args.group_cmd
    if action == "show":
        return _console_view(args, lambda a: a.group(args.name), _group_text)
    if action == "reset-offset":
        return _console_view(args, lambda a: a.reset_offset(args.name, {"timestamp": args.time, "topic": args.topic}),
                             _reset_text)
    if action == "create":
        from .broker.topic_validator import validate_group
        validate_group(args.name)
    remote = _admin_target(args)
    if remote is not None:
        if action == "create":
            body = {"group": args.name, "fifo": args.fifo}
            if args.max_delivery_attempts is not None:
                body["max_delivery_attempts"] = args.max_delivery_attempts
            r = remote.update_group(body)
            view, existed = r["group"]["config"], not r["created"]
        elif action == "delete":
            remote.delete_group(args.name)
        else:
            rows = [i["config"] for i in _all_pages(lambda o: remote.groups("", o, 200, args.all))]
    else:
        with _admin_broker(args, create=action == "create") as broker:
            if action == "create":
                existed = args.name in broker.groups()
                view = group_view(broker.create_group(args.name, fifo=args.fifo,
                                                      max_delivery_attempts=args.max_delivery_attempts), False)
            elif action == "delete":
                if args.name not in broker.groups():
                    raise NotFoundError(not_found("consumer group", args.name))
                broker.delete_group(args.name)
            else:
                from .broker import SubscriptionGroupManager
                system = set(SubscriptionGroupManager(broker.path, broker.config).subscription_group_table)
                rows = [group_view(g, name in system) for name, g in sorted(broker.groups().items())
                        if args.all or name not in system]
    if action == "create":
        if args.json:
            _emit_json(view, sys.stdout)
        else:
            print(f"{'updated' if existed else 'created'} group {view['name']}: "
                  f"{'FIFO' if view['fifo'] else 'concurrent'}, max delivery attempts {view['max_delivery_attempts']}")
    elif action == "delete":
        if args.json:
            _emit_json({"deleted": args.name}, sys.stdout)
        else:
            print(f"deleted group {args.name} and its offsets")
    elif args.json:
        _emit_json(rows, sys.stdout)
    else:
        table([(r["name"], "FIFO" if r["fifo"] else "-", r["max_delivery_attempts"], r["retry_queue_nums"],
                "yes" if r["consume_enable"] else "no") for r in rows],
              ("group", "fifo", "max attempts", "retry queues", "consume"), sys.stdout)
    return EXIT_OK


def dlq_cmd(args: argparse.Namespace) -> int:
    return _console_view(args, lambda a: a.resend_dlq(args.offset), _resent_text)


def send_cmd(args: argparse.Namespace) -> int:
    """mqadmin sendMessage: one message through the broker's send, on STORE or through --server."""
    body = {"topic": args.topic, "body": args.body, "tags": args.tags, "keys": args.keys or [],
            "queue_id": args.queue}
    r = _console_call(args, lambda a: a.send_message(body))
    if args.json:
        _emit_json(r, sys.stdout)
    else:
        print(f"{r['status']} msg_id {r['msg_id']} -> {r['topic']} queue {r['queue_id']} offset {r['queue_offset']} "
              f"(commitlog {r['commitlog_offset']})")
    return EXIT_OK


def consume_cmd(args: argparse.Namespace) -> int:
    """mqadmin consumeMessage: the next messages a group gets from a topic; --commit moves its offsets past them."""
    body = {"topic": args.topic, "count": args.count, "commit": args.commit}
    r = _console_call(args, lambda a: a.consume(args.group, body))
    if args.json:
        _emit_json(r, sys.stdout)
        return EXIT_OK
    for m in r["items"]:
        print(f"{m['topic']} queue {m['queue_id']} offset {m['queue_offset']} msg_id {m['msg_id']} "
              f"tags {m['tags'] or '-'} keys {' '.join(m['keys']) or '-'} stored {m['store_time']}")
        print("  " + m["text"] + (" …" if m["text_truncated"] else ""))
    moved = "; offsets committed" if r["committed"] else " (offsets unchanged: --commit moves them)"
    print(f"{len(r['items'])} message(s) for {r['group']}{moved if r['items'] else ''}")
    return EXIT_OK


def broker_cmd(args: argparse.Namespace) -> int:
    """mqadmin getBrokerConfig / updateBrokerConfig (--set KEY=VALUE, the keys that take effect at run time)."""
    changes = {}
    for item in args.set or ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise AdminError(f"--set: expected KEY=VALUE, got {item!r}")
        changes[key.strip()] = value.strip()
    if changes and not args.server:
        raise AdminError("--set changes a running server's settings (--server URL); a store's come from the "
                         "broker.conf it is served with: edit that file")
    r = _console_call(args, (lambda a: a.update_broker_config(changes)) if changes else (lambda a: a.broker_config()))
    if args.json:
        _emit_json(r, sys.stdout)
    elif changes:
        for key, d in sorted(r["changed"].items()):
            print(f"{key}: {d['old']} -> {d['new']}")
    else:
        table([(k, str(v).lower() if isinstance(v, bool) else v, "yes" if k in r["changeable"] else "-")
               for k, v in sorted(r["config"].items())],
              ("key", "value", "runtime"), sys.stdout)
    return EXIT_OK


def connections_cmd(args: argparse.Namespace) -> int:
    """mqadmin consumerConnection (--group) / producerConnection (--topic): clients connected to a running server."""
    if not args.server:
        raise AdminError("connections are a running server's: give --server URL")
    r = RemoteAdmin(args.server, args.user).connections(args.group or "", args.topic or "")
    if args.json:
        _emit_json(r, sys.stdout)
    else:
        table([(c["client_id"], c["kind"], c["group"] or "-", ",".join(c["topics"]) or "-", c["address"],
                c["language"] or "-", c["version"] or "-", c["last_seen"]) for c in r["items"]],
              ("client", "kind", "group", "topics", "address", "language", "version", "last seen"), sys.stdout)
    return EXIT_OK


def _console_call(args: argparse.Namespace, op):
    """``op`` over --server's JSON API or the console's operations over STORE; the answer's dict."""
    remote = _admin_target(args)
    if remote is not None:
        return op(remote)
    with local_admin(args.store) as admin:
        return run_admin(lambda: op(admin))


def _admin_args(q: argparse.ArgumentParser, what: str, config: bool = True) -> None:
    q.add_argument("store", nargs="?", help="store directory no server holds (or --server URL instead)")
    q.add_argument("--server", metavar="URL", help="a running server's console instead of STORE, e.g. "
                                                   "http://127.0.0.1:8080 (the console rmqcore serve starts)")
    q.add_argument("--user", metavar="AK:SK", help="with --server: HTTP Basic account (accessKey:secretKey)")
    if config:
        q.add_argument("--config", metavar="FILE", help="with STORE: a RocketMQ broker.conf (brokerName, "
                                                        "autoCreateTopicEnable, ...) the server runs with")
    q.add_argument("--json", action="store_true", help=f"print {what} as JSON (for scripts)")


def add_commands(sub) -> None:
    """The topic, group and dlq commands on rmqcore's command line (cli.build_parser)."""
    where = ("STORE (a store no server holds: its lock is taken) or --server URL (a running server, through its "
             "console's JSON API); the same options and answers either way. A topic, group or message that does not "
             "exist is one line, exit status 1.")
    tp = sub.add_parser("topic", help="create, list, show or delete topics (STORE or --server URL)",
                        description="Admin of the broker's topics (config/topics.json), on " + where)
    tsub = tp.add_subparsers(dest="topic_cmd", required=True, metavar="{create,list,show,delete}",
                             help="create or update, list, show, delete")
    tc = tsub.add_parser("create", help="create or update a topic",
                         description="Create (or update) NAME with --queues read and write queues. --type is 5.x's "
                                     "TopicMessageType, kept as the topic's message.type attribute.")
    _admin_args(tc, "the topic")
    tc.add_argument("name", help="topic name (^[%%|a-zA-Z0-9_-]+$, at most 127 characters)")
    tc.add_argument("--queues", type=int, default=4, help="read and write queues (default 4)")
    tc.add_argument("--type", choices=MESSAGE_TYPES, help="message type (default: none written, read as NORMAL)")
    tl = tsub.add_parser("list", help="list topics (system topics with --all)")
    _admin_args(tl, "the topics")
    tl.add_argument("--all", action="store_true", help="include the broker's system topics")
    ts = tsub.add_parser("show", help="a topic's queues, offsets and the groups consuming it")
    _admin_args(ts, "the topic", config=False)
    ts.add_argument("name", help="topic name")
    td = tsub.add_parser("delete", help="delete a topic's config and every group's offsets in it")
    _admin_args(td, "the result")
    td.add_argument("name", help="topic name")
    tp.set_defaults(func=topic_cmd)

    gp = sub.add_parser("group", help="create, list, show, delete consumer groups, reset their offsets",
                        description="Admin of the broker's subscription groups (config/subscriptionGroup.json, as "
                                    "a 5.x broker writes them), on " + where)
    gsub = gp.add_subparsers(dest="group_cmd", required=True, metavar="{create,list,show,delete,reset-offset}",
                             help="create or update, list, show, delete, reset-offset")
    gc = gsub.add_parser("create", help="create or update a group",
                         description="Create (or update) group NAME. --fifo sets consumeMessageOrderly (FIFO "
                                     "consumption for 5.x clients); --max-delivery-attempts N sets retryMaxTimes to "
                                     "N - 1, as the 5.x proxy gives clients retryMaxTimes + 1 attempts.")
    _admin_args(gc, "the group")
    gc.add_argument("name", help="group name (^[%%|a-zA-Z0-9_-]+$, at most 255 characters)")
    gc.add_argument("--fifo", action="store_true", help="consume in order (consumeMessageOrderly)")
    gc.add_argument("--max-delivery-attempts", type=int, metavar="N",
                    help="deliveries before the DLQ (default 17: retryMaxTimes 16)")
    gl = gsub.add_parser("list", help="list groups (system groups with --all)")
    _admin_args(gl, "the groups")
    gl.add_argument("--all", action="store_true", help="include the broker's system groups")
    gs = gsub.add_parser("show", help="a group's lag and in-flight per queue, retry and DLQ counts, clients")
    _admin_args(gs, "the group", config=False)
    gs.add_argument("name", help="group name")
    gd = gsub.add_parser("delete", help="delete a group's config and its offsets")
    _admin_args(gd, "the result")
    gd.add_argument("name", help="group name")
    gr = gsub.add_parser("reset-offset", help="move the group's queues to the first message stored at or after a "
                                              "time (RocketMQ's resetOffsetByTime)")
    _admin_args(gr, "the result", config=False)
    gr.add_argument("name", help="group name")
    gr.add_argument("--time", required=True, help="milliseconds since the epoch or ISO 8601 (UTC without zone)")
    gr.add_argument("--topic", help="only this topic (default: every topic the group has offsets in)")
    gp.set_defaults(func=group_cmd)

    dq = sub.add_parser("dlq", help="resend a dead letter to its group (STORE or --server URL)",
                        description="Store a %%DLQ%% message again in its group's retry topic, on " + where)
    dsub = dq.add_subparsers(dest="dlq_cmd", required=True, metavar="{resend}", help="resend")
    dr = dsub.add_parser("resend", help="resend the dead letter at a commitlog offset")
    _admin_args(dr, "the result", config=False)
    dr.add_argument("offset", type=int, help="the dead letter's commitlog offset")
    dq.set_defaults(func=dlq_cmd)

    sm = sub.add_parser("send", help="send a test message to a topic (mqadmin sendMessage; STORE or --server URL)",
                        description="Store one message through the broker's send (its checks, topic auto-creation, "
                                    "a random queue unless --queue), on " + where)
    _admin_args(sm, "the result", config=False)
    sm.add_argument("topic", help="topic name")
    sm.add_argument("body", help="the message body (text, stored as UTF-8)")
    sm.add_argument("--tags", help="the message's tag")
    sm.add_argument("--keys", nargs="+", metavar="KEY", help="the message's keys (what a search by key finds)")
    sm.add_argument("--queue", type=int, default=-1, metavar="ID", help="queue id (default: a random write queue)")
    sm.set_defaults(func=send_cmd)

    cm = sub.add_parser("consume", help="the next messages a group gets from a topic (mqadmin consumeMessage)",
                        description="Read up to --count messages of TOPIC from GROUP's committed offsets, queue by "
                                    "queue; --commit moves the offsets past them as a consumer's commit would. On "
                                    + where)
    _admin_args(cm, "the messages", config=False)
    cm.add_argument("group", help="consumer group (must exist)")
    cm.add_argument("topic", help="topic name")
    cm.add_argument("--count", type=int, default=1, help="messages to read, 1..32 (default 1)")
    cm.add_argument("--commit", action="store_true", help="commit the group's offsets past what was read")
    cm.set_defaults(func=consume_cmd)

    bk = sub.add_parser("broker", help="the broker's settings (mqadmin getBrokerConfig / updateBrokerConfig)",
                        description="Print every broker.conf key the broker and its store act on, with its value; "
                                    "with --server URL and --set KEY=VALUE, change the keys that take effect while "
                                    "the server runs (brokerPermission, autoCreateTopicEnable, "
                                    "autoCreateSubscriptionGroup, rejectTransactionMessage, transactionTimeOut, "
                                    "transactionCheckMax, transactionCheckInterval) until it stops.")
    bsub = bk.add_subparsers(dest="broker_cmd", required=True, metavar="{config}", help="config")
    bc = bsub.add_parser("config", help="print (or with --set, change) the broker's settings")
    _admin_args(bc, "the settings", config=False)
    bc.add_argument("--set", action="append", metavar="KEY=VALUE", help="with --server: change a runtime key "
                                                                        "(repeatable)")
    bk.set_defaults(func=broker_cmd)

    cn = sub.add_parser("connections", help="clients connected to a running server, per group or topic "
                                            "(mqadmin consumerConnection / producerConnection)")
    cn.add_argument("--server", metavar="URL", required=True, help="the running server's console, e.g. "
                                                                   "http://127.0.0.1:8080")
    cn.add_argument("--user", metavar="AK:SK", help="HTTP Basic account (accessKey:secretKey)")
    cn.add_argument("--group", help="only this consumer group's clients")
    cn.add_argument("--topic", help="only the producers that declared this topic")
    cn.add_argument("--json", action="store_true", help="print the clients as JSON (for scripts)")
    cn.set_defaults(func=connections_cmd)
