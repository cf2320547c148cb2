"""The console's aiohttp application: pages (server-rendered with Jinja2), the JSON API they share their data with
(``/api/v1``, see docs/console-api.md), ``/metrics`` and the static files.

aiohttp because it is asyncio's own HTTP server: the console runs on the gRPC server's event loop, in its process,
with no thread of its own. Reads of the store run in the loop's default executor (``asyncio.to_thread``), so a
slow disk never stalls the gRPC side; each is bounded (see data.py), so no answer loads the whole store.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import importlib.util
import json
import logging
import os
import time
from urllib.parse import quote

import jinja2
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..broker.errors import BrokerError, IllegalNameError, NoPermissionError
from ..errors import RmqStoreError
from .access import ALLOWED_HOST_FLAG, CHANGE_METHODS, TOKEN_HEADER, ConsoleAccess, is_loopback
from .data import DEFAULT_LIMIT, MAX_LIMIT, MESSAGE_TYPES, ConsoleData, ConsoleError, int_arg
from .history import WINDOW_S, MinuteHistory
from .metrics import make_registry

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC_DIR = os.path.join(HERE, "static")
TEMPLATE_DIR = os.path.join(HERE, "templates")
API = "/api/v1"

DATA_KEY = web.AppKey("data", ConsoleData)
SERVER_KEY = web.AppKey("server", object)
REGISTRY_KEY = web.AppKey("registry", object)
JINJA_KEY = web.AppKey("jinja", jinja2.Environment)
SAMPLER_KEY = web.AppKey("sampler", asyncio.Task)
HISTORY_KEY = web.AppKey("history", MinuteHistory)
MINUTES_KEY = web.AppKey("minutes", asyncio.Task)
ACCESS_KEY = web.AppKey("access", ConsoleAccess)
REFUSED_HOSTS_KEY = web.AppKey("refused_hosts", set)


def plotly_js_path() -> str | None:
    """plotly.min.js as the plotly package ships it (found without importing plotly, which is heavy)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "package_data", "plotly.min.js")
        if os.path.exists(path):
            return path
    return None


# ---------------------------------------------------------------------------------------------- middlewares
def _unauthorized(text: str) -> web.Response:
    return web.json_response({"error": text}, status=401,
                             headers={"WWW-Authenticate": 'Basic realm="rmqcore", charset="UTF-8"'})


@web.middleware
async def host_middleware(request: web.Request, handler):
    """Every request names this console in its Host (a rebound DNS name does not: see access.py)."""
    refusal = request.app[ACCESS_KEY].host_refusal(request.headers.get("Host"))
    if refusal is not None:
        # Said once per name (a page hammering the console must not flood the log); the rest at debug level.
        seen = request.app[REFUSED_HOSTS_KEY]
        name = request.headers.get("Host", "")
        if name not in seen and len(seen) < 64:
            seen.add(name)
            log.warning("console: refused %s %s: %s", request.method, request.path, refusal)
        else:
            log.debug("console: refused %s %s: %s", request.method, request.path, refusal)
        return web.json_response({"error": refusal}, status=421)
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """HTTP Basic with the gRPC side's accounts: user = accessKey, password = secretKey. Reads need an account,
    changes (POST/PUT/DELETE) an admin one, as RocketMQ's ACL gives admin operations to admins only. With the
    ACL off (server.acl None) reads are open, as the gRPC side is; changes are refused (see csrf_middleware)
    unless the console was started to allow anonymous changes."""
    acl = getattr(request.app[SERVER_KEY], "acl", None)
    if acl is None:
        request["user"] = None
        return await handler(request)
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return _unauthorized("authentication required (HTTP Basic: accessKey / secretKey)")
    try:
        user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return _unauthorized("malformed Basic credentials")
    secret = acl.secret_key(user)
    if secret is None or not hmac.compare_digest(secret.encode(), password.encode()):
        return _unauthorized("unknown accessKey or wrong secretKey")
    request["user"] = user
    if request.method not in ("GET", "HEAD", "OPTIONS") and not acl.is_admin(user):
        return web.json_response({"error": f"accessKey {user!r} is not an admin: changes need an admin account"},
                                 status=403)
    return await handler(request)


@web.middleware
async def csrf_middleware(request: web.Request, handler):
    """Changes come as JSON from the console's own pages or a script holding the token: a cross-site form cannot
    send application/json nor the token header without a CORS preflight this server never answers, a browser's
    Origin / Sec-Fetch-Site must say same-origin, and without accounts changes need the explicit flag."""
    if request.method in CHANGE_METHODS:
        if request.method != "DELETE" and request.content_type != "application/json":
            return web.json_response({"error": "changes take a JSON body (Content-Type: application/json)"},
                                     status=415)
        refusal = request.app[ACCESS_KEY].change_refusal(request.headers, request.headers.get("Host"),
                                                         request.get("user") is not None)
        if refusal is not None:
            return web.json_response({"error": refusal}, status=403)
    return await handler(request)


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Refusals as JSON for the API, as a page for a person; Server-Timing says how long the server took."""
    t0 = time.perf_counter()
    try:
        resp = await handler(request)
    except web.HTTPException:
        raise
    except (ConsoleError, BrokerError, RmqStoreError, ValueError) as e:
        status = getattr(e, "status", None) or (403 if isinstance(e, NoPermissionError) else 400)
        if isinstance(e, IllegalNameError):
            status = 400
        if request.path.startswith(API) or request.method != "GET":
            resp = web.json_response({"error": str(e), "type": type(e).__name__}, status=status)
        else:
            resp = render(request, "error.html", {"status": status, "message": str(e)}, status=status)
    resp.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1000:.1f}"
    return resp


# ---------------------------------------------------------------------------------------------- helpers
def render(request: web.Request, template: str, ctx: dict, status: int = 200) -> web.Response:
    env = request.app[JINJA_KEY]
    server = request.app[SERVER_KEY]
    ctx = dict(ctx, path=request.path, user=request.get("user"), broker_name=server.broker.config.broker_name,
               listen=f"{server.host}:{server.port}", message_types=MESSAGE_TYPES, query=request.query,
               csrf_token=request.app[ACCESS_KEY].token)
    text = env.get_template(template).render(**ctx)
    return web.Response(text=text, content_type="text/html", status=status)


def _paging(request: web.Request) -> tuple[int, int]:
    offset = int_arg(request.query.get("offset"), "offset", 0, 1 << 31, 0)
    limit = int_arg(request.query.get("limit"), "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    return offset, limit


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "") in ("1", "true", "on", "yes")


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConsoleError(f"request body: not JSON ({e})") from None
    if not isinstance(body, dict):
        raise ConsoleError("request body: expected a JSON object")
    return body


def _data(request: web.Request) -> ConsoleData:
    return request.app[DATA_KEY]


def _offset_arg(request: web.Request) -> int:
    return int_arg(request.match_info["offset"], "commitlog offset", 0, (1 << 63) - 1)


# ---------------------------------------------------------------------------------------------- reads
async def api_session(request):
    """What a script needs before a change: the change token (send it as the header named here), who it is, and
    whether this console takes changes at all. Same-origin only, as every answer here (no CORS)."""
    access = request.app[ACCESS_KEY]
    user = request.get("user")
    if user is not None:
        changes = bool(request.app[SERVER_KEY].acl.is_admin(user))
    else:
        changes = access.allow_anonymous_changes
    return web.json_response({"csrf_token": access.token, "csrf_header": TOKEN_HEADER, "user": user,
                              "changes_allowed": changes, "tls": access.tls},
                             headers={"Cache-Control": "no-store"})


async def api_overview(request):
    return web.json_response(await asyncio.to_thread(_data(request).overview))


async def api_series(request):
    seconds = int_arg(request.query.get("seconds"), "seconds", 10, 600, 300)
    return web.json_response(_data(request).history.series(seconds))


async def api_topics(request):
    offset, limit = _paging(request)
    return web.json_response(await asyncio.to_thread(
        _data(request).topics, request.query.get("q", ""), offset, limit, _flag(request, "system")))


async def api_topic(request):
    return web.json_response(await asyncio.to_thread(_data(request).topic, request.match_info["topic"]))


async def api_queue_messages(request):
    qid = int_arg(request.match_info["queue_id"], "queue_id", 0, (1 << 31) - 1)
    q = request.query
    offset = int_arg(q.get("offset"), "offset", 0, (1 << 63) - 1, -1)
    limit = int_arg(q.get("limit"), "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    return web.json_response(await asyncio.to_thread(
        _data(request).queue_messages, request.match_info["topic"], qid, None if offset < 0 else offset, limit,
        request.get("user")))


async def api_groups(request):
    offset, limit = _paging(request)
    return web.json_response(await asyncio.to_thread(
        _data(request).groups, request.query.get("q", ""), offset, limit, _flag(request, "system")))


async def api_group(request):
    return web.json_response(await asyncio.to_thread(_data(request).group, request.match_info["group"]))


async def api_dlq(request):
    q = request.query
    offset = int_arg(q.get("offset"), "offset", 0, (1 << 63) - 1, -1)
    limit = int_arg(q.get("limit"), "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    return web.json_response(await asyncio.to_thread(
        _data(request).dlq_messages, request.match_info["group"], None if offset < 0 else offset, limit,
        request.get("user")))


def _search_args(request) -> dict:
    q = request.query
    return {"topic": q.get("topic", "").strip(), "key": q.get("key", "").strip(),
            "msg_id": q.get("msg_id", "").strip(), "begin": q.get("begin") or None, "end": q.get("end") or None,
            "after": q.get("after", ""), "limit": int_arg(q.get("limit"), "limit", 1, MAX_LIMIT, DEFAULT_LIMIT),
            "user": request.get("user")}


async def api_messages(request):
    return web.json_response(await asyncio.to_thread(_data(request).search, **_search_args(request)))


async def api_message(request):
    return web.json_response(await asyncio.to_thread(_data(request).message, _offset_arg(request),
                                                     request.get("user")))


# ---------------------------------------------------------------------------------------------- actions
async def api_update_topic(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(_data(request).update_topic, body))


async def api_delete_topic(request):
    return web.json_response(await asyncio.to_thread(_data(request).delete_topic, request.match_info["topic"]))


async def api_update_group(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(_data(request).update_group, body))


async def api_delete_group(request):
    return web.json_response(await asyncio.to_thread(_data(request).delete_group, request.match_info["group"]))


async def api_reset_offset(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(
        _data(request).reset_offset, request.match_info["group"], body))


async def api_resend(request):
    return web.json_response(await asyncio.to_thread(_data(request).resend_dlq, _offset_arg(request)))


async def api_send(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(_data(request).send_message, body))


async def api_consume(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(_data(request).consume, request.match_info["group"], body))


async def api_broker_config(request):
    return web.json_response(_data(request).broker_config())


async def api_update_broker_config(request):
    body = await _json_body(request)
    return web.json_response(await asyncio.to_thread(_data(request).update_broker_config, body))


def _history_seconds(request) -> int:
    return int_arg(request.query.get("seconds"), "seconds", 60, WINDOW_S, WINDOW_S)


async def api_topic_history(request):
    return web.json_response(request.app[HISTORY_KEY].topic(request.match_info["topic"], _history_seconds(request)))


async def api_group_history(request):
    return web.json_response(request.app[HISTORY_KEY].group(request.match_info["group"], _history_seconds(request)))


async def api_connections(request):
    q = request.query
    return web.json_response(_data(request).connections(q.get("group", "").strip(), q.get("topic", "").strip()))


# ---------------------------------------------------------------------------------------------- pages
async def page_overview(request):
    return render(request, "overview.html", {"o": await asyncio.to_thread(_data(request).overview)})


async def page_topics(request):
    offset, limit = _paging(request)
    d = await asyncio.to_thread(_data(request).topics, request.query.get("q", ""), offset, limit,
                                _flag(request, "system"))
    return render(request, "topics.html", {"d": d})


async def page_topic(request):
    return render(request, "topic.html", {"t": await asyncio.to_thread(_data(request).topic,
                                                                       request.match_info["topic"])})


async def page_groups(request):
    offset, limit = _paging(request)
    d = await asyncio.to_thread(_data(request).groups, request.query.get("q", ""), offset, limit,
                                _flag(request, "system"))
    return render(request, "groups.html", {"d": d})


async def page_group(request):
    data = _data(request)
    name = request.match_info["group"]
    q = request.query
    dlq_offset = int_arg(q.get("dlq_offset"), "dlq_offset", 0, (1 << 63) - 1, -1)

    def load():
        try:
            dlq = data.dlq_messages(name, None if dlq_offset < 0 else dlq_offset, 20, request.get("user"))
        except ConsoleError as e:           # a reader who may not read the DLQ sees the group without it
            dlq = {"items": [], "denied": str(e)}
        return data.group(name), dlq
    g, dlq = await asyncio.to_thread(load)
    return render(request, "group.html", {"g": g, "dlq": dlq})


async def page_messages(request):
    args = _search_args(request)
    result, error = None, None
    if args["msg_id"] or args["topic"]:
        try:
            result = await asyncio.to_thread(_data(request).search, **args)
        except (ConsoleError, BrokerError, ValueError) as e:
            error = str(e)
    return render(request, "messages.html", {"a": args, "r": result, "error": error})


async def page_message(request):
    return render(request, "message.html", {"m": await asyncio.to_thread(_data(request).message,
                                                                         _offset_arg(request),
                                                                         request.get("user"))})


async def page_broker(request):
    return render(request, "broker.html", {"b": _data(request).broker_config()})


async def metrics(request):
    registry = request.app[REGISTRY_KEY]
    body = await asyncio.to_thread(generate_latest, registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def plotly_js(request):
    path = plotly_js_path()
    if path is None:
        raise web.HTTPNotFound(text="plotly is not installed (the console extra: pip install -e '.[console]' in a clone)")
    return web.FileResponse(path, headers={"Cache-Control": "public, max-age=86400"})


# ---------------------------------------------------------------------------------------------- the app
async def _sample_forever(data: ConsoleData) -> None:
    """One sample a second for the charts and per-topic rates; an error is logged, never fatal."""
    while True:
        try:
            data.history.sample()
        except Exception:       # a store closing under us: the next sample says the same or recovers
            log.exception("console: rate sample failed")
        await asyncio.sleep(1.0)


def _minute_point(history: MinuteHistory) -> None:
    history.sample()
    history.save()


async def _minutes_forever(history: MinuteHistory) -> None:
    """A point a minute for the topic and group charts, written to the store's config directory (off the loop)."""
    while True:
        try:
            await asyncio.to_thread(_minute_point, history)
        except Exception:       # a store closing under us, a full disk: the next minute tries again
            log.exception("console: minute history sample failed")
        await asyncio.sleep(history.step_s - time.time() % history.step_s + 0.5)


async def _start_sampler(app: web.Application) -> None:
    loop = asyncio.get_running_loop()
    app[SAMPLER_KEY] = loop.create_task(_sample_forever(app[DATA_KEY]))
    app[MINUTES_KEY] = loop.create_task(_minutes_forever(app[HISTORY_KEY]))


async def _stop_sampler(app: web.Application) -> None:
    for key in (SAMPLER_KEY, MINUTES_KEY):
        task = app.get(key)
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
    try:                        # the last point, so a restart's chart joins where this one stopped
        await asyncio.to_thread(_minute_point, app[HISTORY_KEY])
    except Exception:
        log.exception("console: minute history could not be saved")


def _fmt_bytes(n) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _fmt_int(n) -> str:
    return "–" if n is None else f"{n:,}"


def make_app(server, access: ConsoleAccess | None = None) -> web.Application:
    """The console's application; ``access`` defaults to a console on 127.0.0.1 with no anonymous changes."""
    app = web.Application(middlewares=[error_middleware, host_middleware, auth_middleware, csrf_middleware],
                          client_max_size=1024 * 1024)
    data = ConsoleData(server)
    app[ACCESS_KEY] = access if access is not None else ConsoleAccess.for_bind("127.0.0.1")
    app[REFUSED_HOSTS_KEY] = set()
    app[SERVER_KEY] = server
    app[DATA_KEY] = data
    app[HISTORY_KEY] = MinuteHistory(server.broker)
    app[REGISTRY_KEY] = make_registry(server)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["bytes"] = _fmt_bytes
    env.filters["num"] = _fmt_int
    env.filters["q"] = lambda s: quote(str(s), safe="")
    app[JINJA_KEY] = env
    app.on_startup.append(_start_sampler)
    app.on_cleanup.append(_stop_sampler)
    r = app.router
    r.add_get("/", page_overview)
    r.add_get("/topics", page_topics)
    r.add_get("/topics/{topic}", page_topic)
    r.add_get("/groups", page_groups)
    r.add_get("/groups/{group}", page_group)
    r.add_get("/messages", page_messages)
    r.add_get(r"/messages/{offset:\d+}", page_message)
    r.add_get("/broker", page_broker)
    r.add_get("/metrics", metrics)
    r.add_get("/static/vendor/plotly.min.js", plotly_js)
    r.add_static("/static", STATIC_DIR)
    r.add_get(API + "/session", api_session)
    r.add_get(API + "/overview", api_overview)
    r.add_get(API + "/series", api_series)
    r.add_get(API + "/topics", api_topics)
    r.add_post(API + "/topics", api_update_topic)
    r.add_get(API + "/topics/{topic}", api_topic)
    r.add_delete(API + "/topics/{topic}", api_delete_topic)
    r.add_get(API + r"/topics/{topic}/queues/{queue_id}/messages", api_queue_messages)
    r.add_get(API + "/groups", api_groups)
    r.add_post(API + "/groups", api_update_group)
    r.add_get(API + "/groups/{group}", api_group)
    r.add_delete(API + "/groups/{group}", api_delete_group)
    r.add_post(API + "/groups/{group}/reset-offset", api_reset_offset)
    r.add_get(API + "/groups/{group}/dlq", api_dlq)
    r.add_get(API + "/messages", api_messages)
    r.add_get(API + r"/messages/{offset:\d+}", api_message)
    r.add_post(API + r"/messages/{offset:\d+}/resend", api_resend)
    r.add_post(API + "/messages", api_send)
    r.add_post(API + "/groups/{group}/consume", api_consume)
    r.add_get(API + "/broker/config", api_broker_config)
    r.add_post(API + "/broker/config", api_update_broker_config)
    r.add_get(API + "/connections", api_connections)
    r.add_get(API + "/topics/{topic}/history", api_topic_history)
    r.add_get(API + "/groups/{group}/history", api_group_history)
    return app


class ConsoleRunner:
    """A running console: ``port`` is the bound port; ``await close()`` stops it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, tls: bool = False):
        self._runner = runner
        self.host = host
        self.port = port
        self.tls = tls

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()


def _warn_exposed(server, host: str, access: ConsoleAccess) -> None:
    """Say it once, at start, when the console is reachable from other machines."""
    if is_loopback(host):
        return
    acl = getattr(server, "acl", None) is not None
    risks = []
    if not acl:
        risks.append("no accounts (--acl): anyone who reaches it reads every message body"
                     + (" and changes topics, groups and offsets (--console-allow-anonymous-changes)"
                        if access.allow_anonymous_changes else ""))
    if not access.tls:
        risks.append("no TLS (--tls-cert): " + ("Basic auth sends secret keys in clear" if acl
                                                else "bodies travel in clear"))
    log.warning("console: listening on %s, not a loopback address%s; it answers to Host %s (add names with %s)",
                host, (": " + "; ".join(risks)) if risks else "", ", ".join(sorted(access.allowed_hosts)),
                ALLOWED_HOST_FLAG)


async def serve_console(server, host: str = "127.0.0.1", port: int = 0, *, allowed_hosts=(),
                        allow_anonymous_changes: bool = False, ssl_context=None) -> ConsoleRunner:
    """Serve the console and /metrics for ``server`` on ``host:port`` (port 0 picks one) on the running loop.

    ``allowed_hosts``: Host names it answers to besides its own (access.allowed_hosts); ``allow_anonymous_changes``:
    without an ACL, take changes from anyone who reaches it; ``ssl_context``: serve HTTPS."""
    access = ConsoleAccess.for_bind(host, allowed_hosts, allow_anonymous_changes, ssl_context is not None)
    app = make_app(server, access)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1] if runner.addresses else port
    _warn_exposed(server, host, access)
    return ConsoleRunner(runner, host, bound, ssl_context is not None)
