"""SubscriptionGroupConfig: one consumer group's switches and retry policy, as subscriptionGroup.json stores it.

4.9.7 writes the fields of FIELDS below. 5.x (5.3.3) adds consumeMessageOrderly (a FIFO group: the proxy's Settings
answer ``fifo`` from it), groupRetryPolicy (GroupRetryPolicy: ``type`` CUSTOMIZED or EXPONENTIAL and the policy of
that type, null ones skipped, so a default group writes ``{"type":"CUSTOMIZED"}``), groupSysFlag,
consumeTimeoutMinute, subscriptionDataSet and attributes. The first two are typed here; the others stay in ``extra``.
A group read from a 4.9.7 file (none of the 5.x fields) is written back as it was; a group read from a 5.x file,
or given a 5.x value (``consume_message_orderly``, ``group_retry_policy``), is written in 5.x's shape, with 5.x's
defaults for the 5.x fields it lacks.
"""
from __future__ import annotations

from ..fastjson import JAVA_INT, JAVA_LONG, Bean, FieldError, check_bool, check_int, check_map, check_str
from .mix_all import MASTER_ID

DEFAULT_RETRY_MAX_TIMES = 16
RETRY_POLICY_TYPES = ("EXPONENTIAL", "CUSTOMIZED")
# CustomizedRetryPolicy's default ``next``: the delay levels' 1s 5s 10s 30s 1m ... 2h in ms.
DEFAULT_CUSTOMIZED_NEXT = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
                           540000, 600000, 1200000, 1800000, 3600000, 7200000)
# The 5.x fields that are not typed here, with the values a 5.x broker writes for a new group.
V5_DEFAULTS = {"attributes": {}, "consumeTimeoutMinute": 15, "groupSysFlag": 0}
V5_FIELDS = ("consumeMessageOrderly", "groupRetryPolicy", "groupSysFlag", "consumeTimeoutMinute",
             "subscriptionDataSet", "attributes")


class ExponentialRetryPolicy:
    """ExponentialRetryPolicy: ``initial`` * ``multiplier`` ** reconsumeTimes ms, at most ``max``."""

    def __init__(self, initial: int = 5000, max: int = 7200000, multiplier: int = 2):   # noqa: A002 (Java's name)
        self.initial, self.max, self.multiplier = initial, max, multiplier

    def to_json(self) -> dict:
        return {"initial": self.initial, "max": self.max, "multiplier": self.multiplier}

    @classmethod
    def from_json(cls, raw, where: str) -> "ExponentialRetryPolicy":
        check_map(raw, where)
        values = {}
        for name in ("initial", "max", "multiplier"):
            if raw.get(name) is not None:
                values[name] = check_int(raw[name], f"{where}.{name}", *JAVA_LONG)
        return cls(**values)

    def next_delay_duration(self, reconsume_times: int) -> int:
        n = min(max(reconsume_times, 0), 32)
        return min(self.max, self.initial * self.multiplier ** n)

    def __eq__(self, other):
        return type(other) is type(self) and self.to_json() == other.to_json()


class CustomizedRetryPolicy:
    """CustomizedRetryPolicy: the delay of attempt reconsumeTimes is ``next[reconsumeTimes + 2]`` (the last one
    past the end), as the old delay levels 3, 4, ... were."""

    def __init__(self, next: list[int] | tuple[int, ...] = DEFAULT_CUSTOMIZED_NEXT):     # noqa: A002
        self.next = list(next)

    def to_json(self) -> dict:
        return {"next": list(self.next)}

    @classmethod
    def from_json(cls, raw, where: str) -> "CustomizedRetryPolicy":
        check_map(raw, where)
        nxt = raw.get("next")
        if nxt is None:
            return cls()
        if not isinstance(nxt, list):
            raise FieldError(f"{where}.next", "expected an array of ms")
        return cls([check_int(v, f"{where}.next[{i}]", *JAVA_LONG) for i, v in enumerate(nxt)])

    def next_delay_duration(self, reconsume_times: int) -> int:
        index = min(max(reconsume_times, 0) + 2, len(self.next) - 1)
        return self.next[index]

    def __eq__(self, other):
        return type(other) is type(self) and self.next == other.next


class GroupRetryPolicy:
    """GroupRetryPolicy: ``type`` and the policy of each type (None when the file has none, as fastjson skips
    nulls); ``retry_policy`` is getRetryPolicy (the default CustomizedRetryPolicy when the chosen one is None)."""

    def __init__(self, type: str = "CUSTOMIZED", exponential: ExponentialRetryPolicy | None = None,  # noqa: A002
                 customized: CustomizedRetryPolicy | None = None):
        if type not in RETRY_POLICY_TYPES:
            raise ValueError(f"group_retry_policy.type: {type!r} is not one of {', '.join(RETRY_POLICY_TYPES)}")
        self.type = type
        self.exponential = exponential
        self.customized = customized

    def to_json(self) -> dict:
        out: dict = {"type": self.type}
        if self.exponential is not None:
            out["exponentialRetryPolicy"] = self.exponential.to_json()
        if self.customized is not None:
            out["customizedRetryPolicy"] = self.customized.to_json()
        return out

    @classmethod
    def from_json(cls, raw, where: str) -> "GroupRetryPolicy":
        check_map(raw, where)
        kind = raw.get("type")
        if kind is None:
            kind = "CUSTOMIZED"
        else:
            check_str(kind, f"{where}.type")
            if kind not in RETRY_POLICY_TYPES:
                raise FieldError(f"{where}.type", f"{kind!r} is not one of {', '.join(RETRY_POLICY_TYPES)}")
        exp = raw.get("exponentialRetryPolicy")
        cus = raw.get("customizedRetryPolicy")
        return cls(kind, ExponentialRetryPolicy.from_json(exp, f"{where}.exponentialRetryPolicy") if exp is not None
                   else None,
                   CustomizedRetryPolicy.from_json(cus, f"{where}.customizedRetryPolicy") if cus is not None
                   else None)

    @property
    def retry_policy(self):
        if self.type == "EXPONENTIAL":
            return self.exponential or CustomizedRetryPolicy()
        return self.customized or CustomizedRetryPolicy()

    def copy(self) -> "GroupRetryPolicy":
        # No checks here: a copy of a value being set is checked by the setter (check_readable), with the field named.
        e, c = self.exponential, self.customized
        return GroupRetryPolicy(self.type, ExponentialRetryPolicy(e.initial, e.max, e.multiplier) if e else None,
                                CustomizedRetryPolicy(c.next) if c else None)

    def __eq__(self, other):
        return type(other) is type(self) and self.to_json() == other.to_json()

    def __repr__(self):
        return f"GroupRetryPolicy({self.to_json()})"


class SubscriptionGroupConfig(Bean):
    """RocketMQ's SubscriptionGroupConfig: the 4.9.7 fields in FIELDS; 5.x's consumeMessageOrderly and
    groupRetryPolicy as ``consume_message_orderly`` and ``group_retry_policy``; the rest of 5.x in ``extra``.
    ``max_delivery_attempts`` is what the 5.x proxy tells its clients: retryMaxTimes + 1."""

    FIELDS = (
        ("group_name", "groupName", "str", None),
        ("consume_enable", "consumeEnable", "bool", True),
        ("consume_from_min_enable", "consumeFromMinEnable", "bool", True),
        ("consume_broadcast_enable", "consumeBroadcastEnable", "bool", True),
        ("retry_queue_nums", "retryQueueNums", "int", 1),
        ("retry_max_times", "retryMaxTimes", "int", DEFAULT_RETRY_MAX_TIMES),
        ("broker_id", "brokerId", "long", MASTER_ID),
        ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly", "long", 1),
        ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable", "bool", True),
    )

    def __init__(self, group_name: str | None = None, *, consume_message_orderly: bool | None = None,
                 group_retry_policy: GroupRetryPolicy | None = None, **values):
        super().__init__(group_name=group_name, **values)
        # Written in 5.x's shape: read from a 5.x file, or given a 5.x value.
        self.v5 = any(name in self.extra for name in V5_FIELDS)
        self._consume_message_orderly = False
        self._group_retry_policy = GroupRetryPolicy()
        if consume_message_orderly is not None:
            self.consume_message_orderly = consume_message_orderly
        if group_retry_policy is not None:
            self.group_retry_policy = group_retry_policy

    @property
    def consume_message_orderly(self) -> bool:
        return self._consume_message_orderly

    @consume_message_orderly.setter
    def consume_message_orderly(self, value: bool) -> None:
        self._consume_message_orderly = value
        self.v5 = True

    @property
    def group_retry_policy(self) -> GroupRetryPolicy:
        return self._group_retry_policy

    @group_retry_policy.setter
    def group_retry_policy(self, value: GroupRetryPolicy) -> None:
        if not isinstance(value, GroupRetryPolicy):
            raise TypeError(f"group_retry_policy must be a GroupRetryPolicy, got {type(value).__name__}")
        self._group_retry_policy = value
        self.v5 = True

    @property
    def max_delivery_attempts(self) -> int:
        """GrpcClientSettingsManager.mergeSubscriptionData: backoff maxAttempts = retryMaxTimes + 1."""
        return self.retry_max_times + 1

    @max_delivery_attempts.setter
    def max_delivery_attempts(self, value: int) -> None:
        if type(value) is not int or value < 1:
            raise ValueError(f"max_delivery_attempts must be an int >= 1, got {value!r}")
        self.retry_max_times = value - 1

    @classmethod
    def from_json(cls, obj, where: str):
        g = super().from_json(obj, where)
        orderly = g.extra.pop("consumeMessageOrderly", None)
        if orderly is not None:
            g._consume_message_orderly = check_bool(orderly, f"{where}.consumeMessageOrderly")
        policy = g.extra.pop("groupRetryPolicy", None)
        if policy is not None:
            g._group_retry_policy = GroupRetryPolicy.from_json(policy, f"{where}.groupRetryPolicy")
        for name in ("groupSysFlag", "consumeTimeoutMinute"):
            if g.extra.get(name) is not None:
                check_int(g.extra[name], f"{where}.{name}", *JAVA_INT)
        return g

    def to_json(self) -> dict:
        out = super().to_json()
        if out["groupName"] is None:
            del out["groupName"]
        if self.v5:
            for name, default in V5_DEFAULTS.items():
                if name not in out:
                    out[name] = dict(default) if isinstance(default, dict) else default
            out["consumeMessageOrderly"] = self._consume_message_orderly
            out["groupRetryPolicy"] = self._group_retry_policy.to_json()
        return out

    def copy(self):
        c = super().copy()
        c._consume_message_orderly = self._consume_message_orderly
        c._group_retry_policy = self._group_retry_policy.copy()
        c.v5 = self.v5
        return c

    def __repr__(self):
        r = super().__repr__()
        if self.v5:
            r = r[:-1] + (f", consume_message_orderly={self._consume_message_orderly!r}, "
                          f"group_retry_policy={self._group_retry_policy!r})")
        return r
