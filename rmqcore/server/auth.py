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
"""
from __future__ import annotations

import hmac
import json
import os
from hashlib import sha1

PERMS = {"DENY": 0, "PUB": 1, "SUB": 2, "PUB|SUB": 3, "SUB|PUB": 3, "ANY": 3}
PUB, SUB = 1, 2


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

    def authenticate(self, metadata: dict) -> Account:
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
        return account

    @staticmethod
    def check(account: Account, *, topic: str | None = None, group: str | None = None, need: int = 0) -> None:
        """Raise AuthError(forbidden) unless ``account`` may PUB/SUB ``topic`` (and SUB as ``group``)."""
        if account.admin:
            return
        if topic is not None and need:
            have = account.topics.get(topic, account.default_topic)
            if have & need != need:
                raise AuthError(True, f"access key {account.access_key!r} has no {'PUB' if need == PUB else 'SUB'} "
                                      f"permission on topic {topic!r}")
        if group is not None:
            have = account.groups.get(group, account.default_group)
            if not have & SUB:
                raise AuthError(True, f"access key {account.access_key!r} has no SUB permission on group {group!r}")
