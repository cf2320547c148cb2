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

(YAML needs PyYAML; a ``.json`` file of the same shape needs nothing.) A wrong key or signature is UNAUTHORIZED;
a missing permission FORBIDDEN, as the proxy answers.

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


class Account:
    __slots__ = ("access_key", "secret_key", "admin", "default_topic", "default_group", "topics", "groups")

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


class Acl:
    """The accounts of one ACL file; what the server asks: who signed a request, and may they do this."""

    def __init__(self, accounts: list[Account]):
        self.accounts = {a.access_key: a for a in accounts}

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
        return cls([Account(a if isinstance(a, dict) else {}, f"{path}: accounts[{i}]")
                    for i, a in enumerate(doc["accounts"])])

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
