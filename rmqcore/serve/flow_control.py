"""Flow control of ``rmqcore serve`` per client host: how many topics a host may auto-create, and how fast its
refused requests are answered (issue 36: a client that is refused asks again at once, so a cheap refusal let an
attacker's loop send ~10x more requests than when it was served, and every request costs the event loop gRPC's
per-call work, whatever the answer; the storm under the default creation limit hurt a normal client more than
the storm without one).

Both are token buckets keyed by the peer's host, not by the client id a request names: a client chooses its own
id, not the address its connection comes from.
"""
from __future__ import annotations

import time
from collections import OrderedDict


def peer_host(peer: str) -> str:
    """A gRPC peer string's host: ``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` -> ``1.2.3.4`` / ``::1``."""
    kind, _, rest = (peer or "").partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer or ""


class HostBuckets:
    """A token bucket per host: ``burst`` tokens at most, refilled at ``per_second`` (0: unlimited, every take
    succeeds). At most MAX_HOSTS buckets are kept, the least recently used dropped first (a dropped bucket was the
    longest unused, so the fullest: dropping it forgives little)."""

    MAX_HOSTS = 4096

    def __init__(self, per_second: float, burst: int, clock=time.monotonic):
        self.per_second = per_second
        self.burst = burst
        self.clock = clock
        self._buckets: OrderedDict[str, list] = OrderedDict()      # host -> [tokens, clock time]

    def take(self, host: str) -> bool:
        """Take one token of ``host``'s: False when it has none left."""
        if self.per_second <= 0:
            return True
        now = self.clock()
        b = self._buckets.get(host)
        if b is None:
            b = self._buckets[host] = [float(self.burst), now]
            if len(self._buckets) > self.MAX_HOSTS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(host)
            b[0] = min(float(self.burst), b[0] + (now - b[1]) * self.per_second)
            b[1] = now
        if b[0] < 1.0:
            return False
        b[0] -= 1.0
        return True


class TopicCreationLimiter:
    """Topics one client host may auto-create (QueryRoute, SendMessage): ``burst`` at once, then ``per_second``
    (ServerConfig.topic_create_burst, topic_create_per_second; 0 a second: no limit). RocketMQ's proxy has no such
    limit (its creations go to a broker's thread pool, and its name server's routes); here every creation is a
    change of the one table every send reads."""

    def __init__(self, per_second: float, burst: int):
        self.per_second = per_second
        self.burst = burst
        self._buckets = HostBuckets(per_second, burst)

    def take(self, peer: str) -> str | None:
        """Count one creation for ``peer``: None when allowed, else the text of the refusal."""
        host = peer_host(peer)
        if self._buckets.take(host):
            return None
        return (f"client {host} may auto-create {self.burst} topics at once and {self.per_second:g} a second "
                "after (topicCreateBurst, topicCreatePerSecond)")


class RefusalThrottle:
    """Refused requests of a client host past ``burst`` at once and ``per_second`` after (ServerConfig.refusal_burst,
    refusal_per_second) are answered late (refusal_delay_ms): the refusal is decided at once, with whatever little
    work that took, and its answer waits, so a client that asks again as soon as it is refused (a closed loop: an
    attacker, or a broken client) sends no more than its concurrency / the delay requests a second. A client whose
    requests succeed is never slowed, whatever its rate, nor are the successful requests of other clients on the
    same host. This is how a RocketMQ broker's busy answer comes too: a request waits in the send queue and is
    answered SYSTEM_BUSY (the proxy's TOO_MANY_REQUESTS) once it waited waitTimeMillsInSendQueue, 200 ms by default
    (BrokerFastFailure.cleanExpiredRequestInQueue).

    The delay doubles with each delayed refusal that follows the host's previous one within twice its delay (the
    host kept asking), up to ``max_delay_s`` (refusal_max_delay_ms), and starts again at ``delay_s`` once the host
    paused that long: a loop of 8 streams refused at 200 ms sent 40 requests a second, at 1.6 s it sends 5, and
    each request costs the server gRPC's per-call work whatever the answer (issue 36: the storm under the default
    creation limit). ``budget_s`` (the request's deadline, when the caller knows it) caps a delay at half of it, so
    the client still reads the refusal's reason rather than its own timeout.

    At most ``max_held`` answers wait at once in all (each holds its request's memory); past that a refusal is
    answered at once."""

    def __init__(self, per_second: float, burst: int, delay_s: float, max_delay_s: float | None = None,
                 max_held: int = 1024, clock=time.monotonic):
        self.delay_s = delay_s
        self.max_delay_s = max(delay_s, max_delay_s if max_delay_s is not None else delay_s)
        self.max_held = max_held
        self.held = 0                         # answers waiting now
        self.delayed = 0                      # answers delayed so far (the console's and tests' count)
        self.clock = clock
        self._buckets = HostBuckets(per_second, burst, clock)
        self._late: OrderedDict[str, list] = OrderedDict()     # host -> [its last delay, when it was decided]

    def delay(self, peer: str, budget_s: float | None = None) -> float:
        """A refusal to ``peer``: how long its answer waits (0: at once). The caller that waits calls ``release``
        after."""
        host = peer_host(peer)
        if self.delay_s <= 0 or self._buckets.take(host) or self.held >= self.max_held:
            return 0.0
        now = self.clock()
        late = self._late.get(host)
        if late is None or now - late[1] > 2 * late[0]:
            wait = self.delay_s
        else:
            wait = min(self.max_delay_s, 2 * late[0])
        if late is None:
            late = self._late[host] = [wait, now]
            if len(self._late) > HostBuckets.MAX_HOSTS:
                self._late.popitem(last=False)
        else:
            self._late.move_to_end(host)
            late[0], late[1] = wait, now
        if budget_s is not None:
            wait = min(wait, max(0.0, budget_s / 2))
            if wait <= 0:
                return 0.0
        self.held += 1
        self.delayed += 1
        return wait

    def release(self) -> None:
        self.held -= 1
