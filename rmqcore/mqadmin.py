"""RocketMQ's mqadmin for rmqcore, the parts the command line (cli.py: topic, group, dlq) shares between a store
directory (STORE: the broker is opened there, taking the store's lock) and a running server (``--server URL``:
through the console's JSON API, docs/console-api.md):

- ``topic_view`` / ``group_view``: one topic's or group's config as both answer it (the console's JSON carries the
  same dict as ``config``), so ``--json`` output is the same either way;
- ``RemoteAdmin``: the JSON API's calls; ``local_admin``: the console's operations (rmqcore.console.data) over a
  store directory, for what only the console computes (show, reset-offset, dlq resend).
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
    """RemoteAdmin for ``--server``, else the console's operations over STORE (same methods, same answers)."""
    if args.server:
        yield RemoteAdmin(args.server, args.user)
    else:
        with local_admin(args.store) as admin:
            yield admin


def topic_view(tc, system: bool) -> dict:
    """A topic's config as ``rmqcore topic`` answers it (offline and through a server alike)."""
    from .broker.topic_validator import perm_to_string
    return {"name": tc.topic_name, "read_queue_nums": tc.read_queue_nums, "write_queue_nums": tc.write_queue_nums,
            "perm": tc.perm, "perm_string": perm_to_string(tc.perm), "message_type": tc.message_type,
            "order": tc.order, "topic_filter_type": tc.topic_filter_type, "attributes": tc.attributes,
            "system": system}


def group_view(g, system: bool) -> dict:
    """A group's config as ``rmqcore group`` answers it (offline and through a server alike)."""
    return {"name": g.group_name, "fifo": g.consume_message_orderly, "max_delivery_attempts": g.max_delivery_attempts,
            "retry_max_times": g.retry_max_times, "retry_queue_nums": g.retry_queue_nums,
            "consume_enable": g.consume_enable, "retry_policy": g.group_retry_policy.to_json(), "system": system}


def run_admin(op):
    """``op()`` with the console's and the store's refusals as AdminError (one line, exit 2)."""
    from .console.data import ConsoleError
    from .errors import RmqStoreError
    try:
        return op()
    except ConsoleError as e:
        raise AdminError(str(e)) from None
    except RmqStoreError as e:
        raise AdminError(f"{type(e).__name__}: {e}") from None
