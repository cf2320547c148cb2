"""What the protocols of ``rmqcore serve`` share and neither owns: the serve command and the event loop's lifecycle
(``cli``), the counters the console and ``/metrics`` read (``events``), accounts (``auth``), the SQL92 filter
(``filter``) and connection limits (``connections``).

Only ``cli`` imports the protocol wings (``rmqcore.server``, gRPC; ``rmqcore.remoting``), each when asked; the rest
imports neither, so both wings build on it without importing each other.
"""
