"""Authentication and authorization as RocketMQ 5 does them for gRPC clients (AccessKey/SecretKey, the proxy's
``authorization`` header: ``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex
HMAC-SHA1(sk, x-mq-date-time)>``), with accounts and permissions from a ``plain_acl.yml``-shaped file:

    accounts:
      - accessKey: app
        secretKey: 12345678
        admin: false
        defaultTopicPerm: DENY          # DENY | PUB | SUB | PUB|SUB
        defaultGroupPerm: SUB
        topicPerms: [orders=PUB|SUB, audit=DENY]
        groupPerms: [billing=SUB]
        whiteRemoteAddress: 192.168.0.*   # remoting front only: this address needs no signature
    globalWhiteRemoteAddresses: [10.10.103.*]   # remoting front only: these need no account at all

(YAML needs PyYAML; a ``.json`` file of the same shape needs nothing.) A wrong key or signature is UNAUTHORIZED;
a missing permission FORBIDDEN, as the proxy answers. The remoting front (rmqcore/remoting/acl.py) checks the 4.x
clients' own signature against the same accounts, honours the white-listed addresses as RocketMQ 4.x does, and asks
``Acl.check`` the same permission questions.

The signature covers only ``x-mq-date-time``, so a captured request's headers would sign any request for as long as
the server takes that date: it must be within ``max_skew_s`` (ServerConfig.auth_clock_skew_s, 5 minutes by default)
of the server's clock. RocketMQ 5's clients write their *local* wall clock there with a literal ``Z`` (the Java
client's SimpleDateFormat without a time zone, the Python client's ``datetime.now()``), so the date is taken as
UTC or as the server's local time, whichever is nearer: a client on UTC, or in the server's zone, is accepted; one
whose clock is off by more than the window, or set to another zone, is not (run it with ``TZ=UTC``).
"""
from __future__ import annotations

import calendar
import hmac
import ipaddress
import json
import os
import time
from hashlib import sha1

PERMS = {"DENY": 0, "PUB": 1, "SUB": 2, "PUB|SUB": 3, "SUB|PUB": 3, "ANY": 3}
PUB, SUB = 1, 2
# The default window of x-mq-date-time around the server's clock (s), either way.
MAX_CLOCK_SKEW_S = 300
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"          # the clients' yyyyMMdd'T'HHmmss'Z'
RETRY_PREFIX = "%RETRY%"                     # MixAll.RETRY_GROUP_TOPIC_PREFIX (auth needs nothing else of the broker)


class AuthError(Exception):
    def __init__(self, forbidden: bool, text: str):
        super().__init__(text)
        self.forbidden = forbidden


class AddressPattern:
    """One ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` entry of plain_acl.yml, read as RocketMQ 4.9.7's
    RemoteAddressStrategyFactory reads it: blank matches nothing; ``*`` (or ``*.*.*.*``) every address; ``a.b.c.{1,2}``
    or ``a.b.c.1,a.b.c.2`` those addresses; ``a.b.*.*`` / ``a.b.c.10-20`` each IPv4 octet ``*``, ``lo-hi`` or a
    number (RocketMQ looks only at the first wildcard octet; every octet is checked here); else one IPv4/IPv6
    address. A pattern RocketMQ would refuse is a ValueError at load, as it is an AclException there."""
    __slots__ = ("text", "any", "addresses", "octets")

    def __init__(self, text, where: str):
        self.text = "" if text is None else str(text).strip()
        self.any = self.text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self.addresses: frozenset = frozenset()
        self.octets: tuple | None = None
        t = self.text
        if not t or self.any:
            return
        try:
            if t.endswith("}"):
                head, brace, items = t.partition("{")
                if not brace or not head:
                    raise ValueError("expected PREFIX{a,b,...}")
                self.addresses = frozenset(_address(head + i.strip()) for i in items[:-1].split(","))
            elif "," in t:
                self.addresses = frozenset(_address(i.strip()) for i in t.split(",") if i.strip())
            elif "*" in t or "-" in t:
                parts = t.split(".")
                if ":" in t or len(parts) != 4:
                    raise ValueError("a range is four IPv4 octets, each *, LO-HI or a number")
                octets = []
                for part in parts:
                    part = part.strip()
                    lo, dash, hi = part.partition("-")
                    lo, hi = (0, 255) if part == "*" else (int(lo), int(hi)) if dash else (int(part), int(part))
                    if not 0 <= lo <= hi <= 255:
                        raise ValueError(f"octet {part!r} is not within 0-255")
                    octets.append((lo, hi))
                self.octets = tuple(octets)
            else:
                self.addresses = frozenset((_address(t),))
        except ValueError as e:
            raise ValueError(f"{where}: {t!r} is not an address pattern: {e}") from None

    def matches(self, ip: str) -> bool:
        """Whether the peer address ``ip`` (no port) is one this pattern names."""
        if self.any:
            return True
        if not self.addresses and self.octets is None:
            return False
        try:
            addr = _address(ip)
        except ValueError:
            return False
        if self.octets is not None:
            return addr.version == 4 and all(lo <= b <= hi for b, (lo, hi) in zip(addr.packed, self.octets))
        return addr in self.addresses


def _address(text: str):
    """An IP address; an IPv4-mapped IPv6 one (a dual-stack socket's peer) as its IPv4 address."""
    addr = ipaddress.ip_address(text.strip().strip("[]"))
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


class Account:
    __slots__ = ("access_key", "secret_key", "admin", "default_topic", "default_group", "topics", "groups",
                 "white_remote_address")

    def __init__(self, doc: dict, where: str):
        def perm(text, field):
            p = PERMS.get(str(text).strip().upper().replace(" ", ""))
            if p is None:
                raise ValueError(f"{where}.{field}: {text!r} is not one of DENY, PUB, SUB, PUB|SUB")
            return p

        def table(items, field):
            out = {}
            for i, item in enumerate(items or []):
                if not isinstance(item, str) or "=" not in item:
                    raise ValueError(f"{where}.{field}[{i}]: expected NAME=PERM, got {item!r}")
                name, p = item.split("=", 1)
                out[name.strip()] = perm(p, f"{field}[{i}]")
            return out

        ak, sk = doc.get("accessKey"), doc.get("secretKey")
        if not isinstance(ak, str) or not ak or sk is None:
            raise ValueError(f"{where}: accessKey and secretKey are required")
        self.access_key = ak
        self.secret_key = str(sk)
        self.admin = bool(doc.get("admin", False))
        self.default_topic = perm(doc.get("defaultTopicPerm", "DENY"), "defaultTopicPerm")
        self.default_group = perm(doc.get("defaultGroupPerm", "DENY"), "defaultGroupPerm")
        self.topics = table(doc.get("topicPerms"), "topicPerms")
        self.groups = table(doc.get("groupPerms"), "groupPerms")
        self.white_remote_address = AddressPattern(doc.get("whiteRemoteAddress"), f"{where}.whiteRemoteAddress")


class Acl:
    """The accounts of one ACL file; what the server asks: who signed a request, and may they do this."""

    def __init__(self, accounts: list[Account], global_white: list[AddressPattern] = ()):
        self.accounts = {a.access_key: a for a in accounts}
        self.global_white = list(global_white)

    @classmethod
    def load(cls, path: str) -> "Acl":
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if os.path.splitext(path)[1].lower() == ".json":
            doc = json.loads(text)
        else:
            try:
                import yaml
            except ImportError:
                raise ValueError(f"{path}: reading YAML needs PyYAML (the server extra: pip install -e '.[server]' in a clone), or give the "
                                 "same document as .json") from None
            doc = yaml.safe_load(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("accounts"), list):
            raise ValueError(f"{path}: expected a document with an 'accounts' list")
        white = doc.get("globalWhiteRemoteAddresses") or []
        if not isinstance(white, list):
            raise ValueError(f"{path}: globalWhiteRemoteAddresses: expected a list of address patterns")
        return cls([Account(a if isinstance(a, dict) else {}, f"{path}: accounts[{i}]")
                    for i, a in enumerate(doc["accounts"])],
                   [AddressPattern(w, f"{path}: globalWhiteRemoteAddresses[{i}]") for i, w in enumerate(white)])

    def globally_white(self, ip: str) -> bool:
        """Whether ``ip`` is in ``globalWhiteRemoteAddresses``: RocketMQ 4.x lets its requests through unsigned."""
        return any(p.matches(ip) for p in self.global_white)

    # the console's accessors
    def secret_key(self, access_key: str) -> str | None:
        a = self.accounts.get(access_key)
        return a.secret_key if a else None

    def is_admin(self, access_key: str) -> bool:
        a = self.accounts.get(access_key)
        return bool(a and a.admin)

    def may_read(self, access_key: str, topic: str) -> bool:
        """Whether ``access_key`` may read the messages of ``topic`` (SUB, as a consumer's receive needs): the
        console's message reads."""
        account = self.accounts.get(access_key)
        if account is None:
            return False
        try:
            self.check(account, topic=topic, need=SUB)
        except AuthError:
            return False
        return True

    def authenticate(self, metadata: dict, *, max_skew_s: float = MAX_CLOCK_SKEW_S,
                     now: float | None = None) -> Account:
        """The account that signed ``metadata``, or AuthError (not forbidden: UNAUTHORIZED). ``now``: the server's
        time (s since the epoch; a test's to give)."""
        header = metadata.get("authorization", "")
        date = metadata.get("x-mq-date-time", "")
        if not header.startswith("MQv2-HMAC-SHA1 "):
            raise AuthError(False, "authorization header is missing or not MQv2-HMAC-SHA1")
        fields = {}
        for part in header[len("MQv2-HMAC-SHA1 "):].split(","):
            k, _, v = part.strip().partition("=")
            fields[k] = v
        ak = fields.get("Credential", "").split("/")[0]
        account = self.accounts.get(ak)
        if account is None:
            raise AuthError(False, f"no account for access key {ak[:64]!r}")
        want = hmac.new(account.secret_key.encode(), date.encode(), sha1).hexdigest()
        if not hmac.compare_digest(want, fields.get("Signature", "").lower()):
            raise AuthError(False, f"signature of access key {ak!r} does not match")
        check_date(date, max_skew_s, time.time() if now is None else now)
        return account

    @staticmethod
    def check(account: Account, *, topic: str | None = None, group: str | None = None, need: int = 0) -> None:
        """Raise AuthError(forbidden) unless ``account`` may PUB/SUB ``topic`` (and SUB as ``group``)."""
        if account.admin:
            return
        if topic is not None and need and topic.startswith(RETRY_PREFIX):
            # A retry topic is its group's (plain ACL's PlainAccessResource.isRetryTopic: checked against the
            # group's permission, SUB whatever the request), never a topic permission of its own.
            group_of = topic[len(RETRY_PREFIX):]
            if not account.groups.get(group_of, account.default_group) & SUB:
                raise AuthError(True, f"access key {account.access_key!r} has no SUB permission on group "
                                      f"{group_of!r} (of retry topic {topic!r})")
        elif topic is not None and need:
            have = account.topics.get(topic, account.default_topic)
            if have & need != need:
                raise AuthError(True, f"access key {account.access_key!r} has no {'PUB' if need == PUB else 'SUB'} "
                                      f"permission on topic {topic!r}")
        if group is not None:
            have = account.groups.get(group, account.default_group)
            if not have & SUB:
                raise AuthError(True, f"access key {account.access_key!r} has no SUB permission on group {group!r}")


def check_date(date: str, max_skew_s: float, now: float) -> None:
    """AuthError (UNAUTHORIZED) unless ``date`` (x-mq-date-time, yyyyMMdd'T'HHmmss'Z') is within ``max_skew_s``
    of ``now``, read as UTC or as the server's local time (see the module's doc: the clients write their local
    clock with a 'Z')."""
    try:
        stamp = calendar.timegm(time.strptime(date, DATE_TIME_FORMAT))
    except (ValueError, TypeError, OverflowError):
        raise AuthError(False, f"x-mq-date-time {str(date)[:40]!r} is not yyyyMMdd'T'HHmmss'Z'") from None
    # the same wall clock read in the server's zone: what a client in that zone writes
    local = stamp - time.localtime(now).tm_gmtoff
    skew = min(abs(stamp - now), abs(local - now))
    if skew > max_skew_s:
        raise AuthError(False, f"x-mq-date-time {date} is {int(skew)} s from the server's clock, more than the "
                               f"{max_skew_s:g} s allowed (a replayed signature, or a client clock off or in "
                               "another time zone than UTC and the server's)")
