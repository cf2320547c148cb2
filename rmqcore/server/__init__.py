"""The gRPC wing: RocketMQ 5's gRPC protocol (``rmqcore serve --listen``) over a Broker.

Imports the broker, the store and what every protocol shares (``rmqcore.serve``: counters, accounts, the SQL92
filter, connection limits); never the remoting wing, which never imports this package.
"""
