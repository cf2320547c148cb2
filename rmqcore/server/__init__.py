"""The network wing: RocketMQ 5's gRPC protocol (``rmqcore serve``) over a Broker, and what watches it.

Imports the broker and the store; neither imports this package.
"""
from .events import ServerEvents

__all__ = ["ServerEvents"]
