"""Who may drive the console: the Host names it answers to, the token every change carries, whether changes need
an account (issue 36, item 9).

A browser is the console's client and also the way in for anyone else: a page on another site can make the
browser send requests to a console on localhost, and with DNS rebinding (evil.example resolving to 127.0.0.1 after
the page loaded) those requests are same-origin for the browser, so they may read the answers too. Three checks
close that:

* **Host.** Every request must name the console by one of its own names (``allowed_hosts``): the bound address,
  names that resolved to it when the console started (localhost, this machine's name), and the names given with
  ``--console-allowed-host``. A rebound name is not one of them. Names are resolved once, at start: resolving the
  Host of each request is exactly what a rebinding attacker controls.
* **A per-server token on every change.** Pages carry it (``<meta name="rmq-csrf-token">``), the console's
  JavaScript sends it as the ``X-RMQ-CSRF-Token`` header on every POST/PUT/PATCH/DELETE, and scripts read it from
  ``GET /api/v1/session``. Another site cannot read it (no CORS), cannot set the header without a preflight this
  server never grants, and a browser's ``Origin`` / ``Sec-Fetch-Site`` must say same-origin as well.
* **Accounts for changes.** Without an ACL nobody is authenticated, so changes are refused unless the console was
  started with ``--console-allow-anonymous-changes``: reaching the port is then all it takes to delete topics.
"""
from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import secrets
import socket

TOKEN_HEADER = "X-RMQ-CSRF-Token"
ANONYMOUS_FLAG = "--console-allow-anonymous-changes"
ALLOWED_HOST_FLAG = "--console-allowed-host"
WILDCARD_BINDS = ("", "0.0.0.0", "::")
CHANGE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: only this machine reaches such a bind."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _addresses(name: str) -> set[str]:
    try:
        return {info[4][0].split("%", 1)[0] for info in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return set()


def _norm(name: str) -> str:
    name = name.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name


def allowed_hosts(bind: str, extra=()) -> frozenset[str]:
    """The names a request's Host may give for a console bound to ``bind``: the address itself; localhost, this
    machine's name and fully qualified name where they resolved (now) to the bound address (with a wildcard bind,
    to any address of this machine, loopback included); and ``extra`` as given."""
    bind = _norm(bind)
    wildcard = bind in WILDCARD_BINDS
    names = {_norm(e) for e in extra if _norm(e)}
    candidates = {"localhost", socket.gethostname(), socket.getfqdn()}
    if wildcard:
        local = {"127.0.0.1", "::1"}
        for name in candidates - {"localhost"}:
            local |= _addresses(name)
        names |= local
        bound = local
    else:
        names.add(bind)
        bound = {bind} | _addresses(bind)
    for name in candidates:
        if name and _addresses(name) & bound:
            names.add(_norm(name))
    return frozenset(names)


def host_name(header: str) -> str:
    """The name part of a Host header ("[::1]:8080" -> "::1", "Example.COM.:80" -> "example.com")."""
    header = header.strip()
    if header.startswith("["):
        return _norm(header[:header.find("]") + 1] if "]" in header else header)
    name, sep, port = header.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return _norm(name)
    return _norm(header)


@dataclasses.dataclass(frozen=True)
class ConsoleAccess:
    """The console's access policy: ``allowed_hosts`` (see allowed_hosts()), whether changes need an account,
    whether it is served over TLS (for the Origin it expects), ``token`` the per-server change token (new at
    every start)."""

    allowed_hosts: frozenset[str]
    allow_anonymous_changes: bool = False
    tls: bool = False
    token: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(32))

    @classmethod
    def for_bind(cls, bind: str, extra_hosts=(), allow_anonymous_changes: bool = False,
                 tls: bool = False) -> ConsoleAccess:
        return cls(allowed_hosts(bind, extra_hosts), allow_anonymous_changes, tls)

    def host_refusal(self, host_header: str | None) -> str | None:
        """Why a request naming ``host_header`` is refused, or None. A request without Host (HTTP/1.0) comes from
        no browser, so no page can have sent it: accepted."""
        if host_header is None:
            return None
        name = host_name(host_header)
        if name in self.allowed_hosts:
            return None
        return (f"Host {name!r} is not a name of this console (a page of another site, or a DNS name rebound to "
                f"it); start it with {ALLOWED_HOST_FLAG} {name} if that is a name you gave it")

    def change_refusal(self, headers, host_header: str | None, authenticated: bool) -> str | None:
        """Why a change (POST/PUT/PATCH/DELETE) with these headers is refused, or None."""
        if not authenticated and not self.allow_anonymous_changes:
            return ("changes need an account: start the server with --acl (python -m rmqcore.console: --admin), "
                    f"or with {ANONYMOUS_FLAG} to let anyone who reaches this port change topics, groups and "
                    "offsets")
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site != "same-origin":
            return f"cross-site request refused (Sec-Fetch-Site: {site})"
        origin = headers.get("Origin")
        if origin is not None:
            scheme = "https" if self.tls else "http"
            if host_header is None or origin.lower() != f"{scheme}://{host_header}".lower():
                return f"cross-origin request from {origin} refused"
        token = headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(token.encode("utf-8", "replace"), self.token.encode()):
            return (f"changes need the console's token in the {TOKEN_HEADER} header (the pages send it; a script "
                    "reads it from GET /api/v1/session)")
        return None


def add_console_access_args(parser) -> None:
    """The console's access switches, shared by `rmqcore serve` and `python -m rmqcore.console`."""
    parser.add_argument("--console-allowed-host", action="append", default=[], metavar="NAME",
                        help="a Host name the console answers to besides its bound address, localhost and this "
                             "machine's name (a DNS name or proxy in front of it); repeatable")
    parser.add_argument("--console-allow-anonymous-changes", action="store_true",
                        help="without accounts (no --acl), let anyone who reaches the console create and delete "
                             "topics and groups, reset offsets and resend messages (refused by default)")


def console_ssl_context(cert: str, key: str):
    """The console's HTTPS context from the PEM files the gRPC side serves (--tls-cert/--tls-key)."""
    import ssl
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx
