"""ClientHousekeepingService (RocketMQ 4.9.7, broker/client/): clients that stopped heartbeating are dropped.

Every 10 s the broker scans its producer and consumer tables (ProducerManager/ConsumerManager.scanNotActiveChannel)
and, for each registration whose last heartbeat (ClientChannelInfo.lastUpdateTimestamp) is older than
CHANNEL_EXPIRED_TIMEOUT (120 s), removes it from its group's table (a consumer group left with no member is
removed) and closes the channel. The scan removes the registration before the channel's close event is handled,
so that close event (doChannelCloseEvent) finds nothing left and sends no NOTIFY_CONSUMER_IDS_CHANGED: the group's
other members see the smaller member list at their own next rebalance (RebalanceService, every 20 s), as with
4.9.7 (5.x's scan raises CLIENT_UNREGISTER, which does not notify either). A client that closes its connection is
another path (RemotingServer.forget: the rest are notified at once).

The timeout is broker.conf's ``channelExpiredTimeout`` (RocketMQ 5's BrokerConfig key; 4.9.7 has the constant,
120000 ms); the scan runs every 10 s, or every half timeout when that is shorter (a test's short timeout).
"""
from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("rmqcore.remoting")

SCAN_INTERVAL = 10.0        # ClientHousekeepingService.start: scheduleAtFixedRate(..., 10 s, 10 s)


class ClientHousekeepingService:
    def __init__(self, server, expired_timeout_ms: int):
        self.server = server
        self.expired_timeout = expired_timeout_ms / 1000.0
        self.interval = min(SCAN_INTERVAL, max(self.expired_timeout / 2, 0.05))
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while not self.server.stopping:
            await asyncio.sleep(self.interval)
            try:
                self.scan_not_active_channels()
            except Exception:       # as the Java service: say it, scan again next time
                log.exception("remoting: error scanning for expired clients")

    def scan_not_active_channels(self, now: float | None = None) -> list:
        """Drop and close the connections whose client's last heartbeat is older than the timeout; returns
        them."""
        srv = self.server
        limit = (time.time() if now is None else now) - self.expired_timeout
        expired = []
        # ProducerManager.scanNotActiveChannel
        for group, conns in list(srv.producers.items()):
            for conn in list(conns):
                if conn.client.last_seen < limit:
                    conns.discard(conn)
                    conn.client.producer_groups.discard(group)
                    log.warning("SCAN: remove expired channel[%s] from ProducerManager groupChannelTable, producer "
                                "group name: %s", conn.peer, group)
                    expired.append(conn)
        # ConsumerManager.scanNotActiveChannel
        for group, members in list(srv.consumers.items()):
            for conn in list(members):
                if conn.client.last_seen < limit:
                    del members[conn]
                    conn.client.consumer_groups.discard(group)
                    conn.client.consumer_data.pop(group, None)
                    log.warning("SCAN: remove expired channel from ConsumerManager consumerTable. channel=%s, "
                                "consumerGroup=%s", conn.peer, group)
                    expired.append(conn)
            if not members:
                log.warning("SCAN: remove expired channel from ConsumerManager consumerTable, all clear, "
                            "consumerGroup=%s", group)
                del srv.consumers[group]
        for conn in dict.fromkeys(expired):
            if conn.transport is not None:
                conn.transport.close()          # RemotingUtil.closeChannel
        return expired
