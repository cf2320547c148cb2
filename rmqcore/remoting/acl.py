"""RocketMQ 4.x's plain ACL on the remoting protocol: who signed a request, and may they do it.

The 4.x clients sign with an AclClientRPCHook(new SessionCredentials(ak, sk)) (acl/.../AclClientRPCHook.java, tag
rocketmq-all-4.9.7): the hook adds ``AccessKey`` (and ``SecurityToken`` if it has one) to the request's extFields,
then ``Signature`` = Base64(HmacSHA1(sk, the values of every other extField in key order, concatenated, + the
body)) (AclUtils.combineRequestContent, AclSigner). The broker (PlainAccessValidator.parse + PlainPermissionManager.
validate) lets a request through when its peer is in ``globalWhiteRemoteAddresses``; else it needs a known
AccessKey; a peer in that account's ``whiteRemoteAddress`` needs no signature; else the signature must match; then
the admin request codes need an admin account and each resource the request names its permission, checked by the
one permission table both fronts share (rmqcore.serve.auth.Acl.check; a retry topic is its group's).

Which resources each code names is parse()'s switch (``resources`` below). Where this differs from 4.9.7: it names
none for SEND_BATCH_MESSAGE and LITE_PULL_MESSAGE, so a batch or a lite pull needed only a signature; here they need
what a send (PUB on the topic) and a pull (SUB on topic and group) need. It has no admin check on its ACL codes
(50-54, which change and read the accounts; rmqcore does not answer them): here they need an admin account. An
admin account may do anything here (Acl.check, as on the gRPC front); 4.9.7 still holds an admin to the
topicPerms/groupPerms it lists, if it lists any.

A refusal is NO_PERMISSION (16), as RocketMQ 5's broker answers its ACL failures (AuthenticationPipeline /
AuthorizationPipeline), with 4.9.7's AclException messages as the remark ("Check signature failed for
accessKey=...", "No default permission for topic:..."). The 4.9.7 broker itself (aclEnable=true, seen with the
java-broker harness) answers SYSTEM_ERROR (1) with "org.apache.rocketmq.acl.common.AclException: <the same text>,
<a stack frame>": its hook's exception falls into NettyRemotingAbstract's catch-all. The 4.x clients raise the same
MQBrokerException for either code and retry a send on either.

Requests the name server answers (DefaultRequestProcessor's codes, REGISTER_BROKER among them) need no account, on
the name server's port and on the broker's port that answers them too: RocketMQ's name server has no ACL. HA is a
port of its own (rmqcore.ha_service) and has none either. A Java slave's metadata pulls (GET_ALL_TOPIC_CONFIG, ...)
come unsigned, as they do to a Java master: give the slave's address in ``globalWhiteRemoteAddresses``.
"""
from __future__ import annotations

import base64
import hmac
import json
from hashlib import sha1

from ..serve.auth import PUB, SUB, Acl, AuthError
from .codes import (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK, PULL_MESSAGE,
                    LITE_PULL_MESSAGE, QUERY_MESSAGE, HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
                    UPDATE_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
                    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, UPDATE_AND_CREATE_ACL_CONFIG,
                    DELETE_ACL_CONFIG, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, GET_BROKER_CLUSTER_ACL_INFO,
                    GET_BROKER_CLUSTER_ACL_CONFIG, PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG, REGISTER_BROKER,
                    UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, WIPE_WRITE_PERM_OF_BROKER,
                    ADD_WRITE_PERM_OF_BROKER, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, DELETE_TOPIC_IN_NAMESRV,
                    GET_KVLIST_BY_NAMESPACE, GET_TOPICS_BY_CLUSTER, GET_SYSTEM_TOPIC_LIST_FROM_NS,
                    GET_UNIT_TOPIC_LIST, GET_HAS_UNIT_SUB_TOPIC_LIST, GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
                    UPDATE_NAMESRV_CONFIG, GET_NAMESRV_CONFIG, QUERY_DATA_VERSION)

# SessionCredentials' extField names, MixAll.UNIQUE_MSG_QUERY_FLAG (see _signed)
ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
RETRY_PREFIX = "%RETRY%"
# TopicValidator.RMQ_SYS_TRACE_TOPIC: a client's message-trace sends need no topic permission (validate's skip)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

# Permission.ADMIN_CODE (4.9.7), and the ACL-changing codes (see the module's doc)
ADMIN_CODES = frozenset((UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
                         UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, UPDATE_AND_CREATE_ACL_CONFIG,
                         DELETE_ACL_CONFIG, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, GET_BROKER_CLUSTER_ACL_INFO,
                         GET_BROKER_CLUSTER_ACL_CONFIG))
# the name server's DefaultRequestProcessor (4.9.7): no ACL there
NAMESRV_CODES = frozenset((PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG, QUERY_DATA_VERSION, REGISTER_BROKER,
                           UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO,
                           WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER, GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                           DELETE_TOPIC_IN_NAMESRV, GET_KVLIST_BY_NAMESPACE, GET_TOPICS_BY_CLUSTER,
                           GET_SYSTEM_TOPIC_LIST_FROM_NS, GET_UNIT_TOPIC_LIST, GET_HAS_UNIT_SUB_TOPIC_LIST,
                           GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, UPDATE_NAMESRV_CONFIG, GET_NAMESRV_CONFIG))


def _utf16_order(key: str) -> bytes:
    # Java's TreeMap<String, ...> orders by UTF-16 code units, which big-endian UTF-16 bytes compare as
    return key.encode("utf-16-be", "surrogatepass")


def request_content(ext: dict, body: bytes | None, skip: tuple = ()) -> bytes:
    """What a request's signature covers (AclUtils.combineRequestContent): every extField value but Signature (and
    ``skip``), in key order, concatenated as UTF-8, then the body."""
    text = "".join(ext[k] for k in sorted(ext, key=_utf16_order) if k != SIGNATURE and k not in skip)
    data = text.encode("utf-8", "surrogatepass")
    return data + bytes(body) if body else data


def signature(content: bytes, secret_key: str) -> str:
    """AclSigner.calSignature: Base64 of HmacSHA1(secret_key as UTF-8, content)."""
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, sha1).digest()).decode("ascii")


def sign(ext: dict, body: bytes | None, access_key: str, secret_key: str) -> dict:
    """What AclClientRPCHook.doBeforeRequest does to a request's extFields (a Python client's, a test's)."""
    out = dict(ext)
    out[ACCESS_KEY] = access_key
    out.pop(SIGNATURE, None)
    out[SIGNATURE] = signature(request_content(out, body), secret_key)
    return out


def _v2(ext: dict, v1: str, v2: str):
    v = ext.get(v1)
    return ext.get(v2) if v is None else v


def resources(code: int, ext: dict, body: bytes | None) -> list[tuple[str, int]]:
    """(resource, permission) pairs the request needs (PlainAccessValidator.parse's switch): a topic with PUB or
    SUB, or a group as its retry topic with SUB. Fields a request lacks name nothing (the handler refuses it)."""
    if code in (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE):
        topic = _v2(ext, "topic", "b")
        if topic is not None and topic.startswith(RETRY_PREFIX):
            # a send to a retry topic (the client's fallback of a failed send-back): the group's SUB
            group = _v2(ext, "group", "a")
            return [(RETRY_PREFIX + group, SUB)] if group is not None else []
        return [(topic, PUB)] if topic is not None else []
    if code == CONSUMER_SEND_MSG_BACK:
        group = ext.get("group")
        return [(RETRY_PREFIX + group, SUB)] if group is not None else []
    if code in (PULL_MESSAGE, LITE_PULL_MESSAGE, UPDATE_CONSUMER_OFFSET):
        topic, group = ext.get("topic"), ext.get("consumerGroup")
        return [r for r in ((topic, SUB), (None if group is None else RETRY_PREFIX + group, SUB)) if r[0] is not None]
    if code == QUERY_MESSAGE:
        topic = ext.get("topic")
        return [(topic, SUB)] if topic is not None else []
    if code in (UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP):
        group = ext.get("consumerGroup")
        return [(RETRY_PREFIX + group, SUB)] if group else []
    if code == HEART_BEAT:
        # every consumer group the heartbeat names, and every topic it subscribes (its retry topic: the group)
        try:
            data = json.loads(body or b"{}")
            out = []
            for cd in data.get("consumerDataSet") or ():
                out.append((RETRY_PREFIX + str(cd["groupName"]), SUB))
                out.extend((str(s["topic"]), SUB) for s in cd.get("subscriptionDataSet") or ())
            return out
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            # parse's HeartbeatData.decode failing is an AclException: the request is refused
            raise AuthError(True, f"heartbeat body cannot be read for its groups and topics: {e!r}") from None
    return []


class RemotingAclValidator:
    """PlainAccessValidator for RemotingConnection.handle: ``refusal(code, ext, body, peer)`` is None when the
    request may go on, else the remark of its NO_PERMISSION answer."""
    __slots__ = ("acl",)

    def __init__(self, acl: Acl):
        self.acl = acl

    def refusal(self, code: int, ext: dict, body: bytes | None, peer: str) -> str | None:
        if code in NAMESRV_CODES:
            return None
        acl = self.acl
        # RemotingHelper.parseChannelRemoteAddr's "ip:port", the port cut at the last colon as parse() cuts it
        ip = peer.rpartition(":")[0] or peer
        if acl.global_white and acl.globally_white(ip):
            return None
        ak = ext.get(ACCESS_KEY)
        if ak is None:
            return "No accessKey is configured"
        account = acl.accounts.get(ak)
        if account is None:
            return f"No acl config for {ak}"
        if account.white_remote_address.matches(ip):
            return None
        sig = ext.get(SIGNATURE)
        if sig is None or not self._signed(ext, body, account.secret_key, sig.encode("utf-8", "surrogatepass")):
            return f"Check signature failed for accessKey={ak}"
        if code in ADMIN_CODES and not account.admin:
            return f"Need admin permission for request code={code}, but accessKey={ak} is not"
        try:
            needs = resources(code, ext, body)
            for resource, perm in needs:
                if resource == TRACE_TOPIC and perm == PUB:
                    return None     # validate(): message trace's sends skip the permission check
            for resource, perm in needs:
                try:
                    acl.check(account, topic=resource, need=perm)
                except AuthError:
                    if resource.startswith(RETRY_PREFIX):
                        return f"No default permission for group:{resource[len(RETRY_PREFIX):]}"
                    return f"No default permission for topic:{resource}"
        except AuthError as e:
            return str(e)
        return None

    @staticmethod
    def _signed(ext: dict, body, secret_key: str, sig: bytes) -> bool:
        if hmac.compare_digest(signature(request_content(ext, body), secret_key).encode(), sig):
            return True
        # The 4.9.7 broker leaves _UNIQUE_KEY_QUERY out of what it checks (parse()), while the 4.9.7 client, which
        # adds it to a QUERY_MESSAGE before its hook runs, signs it: against a Java broker a signed client's
        # queryMessage never passes. Either reading is taken here (the field only says how to search).
        return UNIQUE_MSG_QUERY_FLAG in ext and hmac.compare_digest(
            signature(request_content(ext, body, (UNIQUE_MSG_QUERY_FLAG,)), secret_key).encode(), sig)
