"""The web console and Prometheus metrics of a running broker (``rmqcore serve --http HOST:PORT``, or
``python -m rmqcore.console STORE --http HOST:PORT`` over a Broker without the gRPC side).

    runner = await serve_console(server, "127.0.0.1", 8080)    # on the server's event loop
    ...
    await runner.close()

``server`` has ``broker``, ``events`` (rmqcore.serve.events.ServerEvents), ``host``, ``port``, ``inflight(group)`` and
``acl`` (None, or an object with ``secret_key(access_key)`` and ``is_admin(access_key)``). Needs the ``console``
extra (aiohttp, jinja2, prometheus_client, plotly).
"""
__all__ = ["serve_console", "make_app", "ConsoleRunner", "ConsoleData", "ConsoleError"]


def __getattr__(name: str):
    # Imported on first use: ``rmqcore.console.data`` (what the admin command line runs offline) must not need
    # aiohttp, Jinja2 and prometheus_client, which only the HTTP side uses.
    if name in ("serve_console", "make_app", "ConsoleRunner"):
        from . import app
        return getattr(app, name)
    if name in ("ConsoleData", "ConsoleError"):
        from . import data
        return getattr(data, name)
    raise AttributeError(f"module 'rmqcore.console' has no attribute {name!r}")
