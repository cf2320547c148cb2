"""The remoting wing: RocketMQ's classic TCP protocol (the 4.x clients) and the name server's part of it, over a
Broker (``rmqcore serve --remoting``, ``--namesrv``).

Imports the broker, the store and what every protocol shares (``rmqcore.serve``: counters, the SQL92 filter); never
the gRPC wing, which never imports this package.
"""
