"""The per-message part of Broker.send and Broker.send_batch, in C."""

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from rmqcore._message import Message

class SendEntry:
    """The checks of a send that depend on its topic alone, cached per topic by the broker."""
    @property
    def topic_config(self) -> Any: ...
    @property
    def queue_id_limit(self) -> int: ...
    @property
    def write_queue_nums(self) -> int: ...
    @property
    def slow(self) -> bool: ...
    def __init__(self, topic_config: Any, queue_id_limit: int, write_queue_nums: int, slow: bool) -> None: ...

class Sender:
    """Broker.send / send_batch over one store."""
    def __init__(self, cache: dict[str, SendEntry], cluster: str, put: Callable[[Message], Any],
                 put_batch: Callable[..., list[Any]], check: Callable[[Message], None],
                 put_transaction: Callable[[Message], Any],
                 put_async: Callable[[Message], Future[Any]] | None = None) -> None: ...
    def send(self, msg: Message) -> Any:
        """Broker.send (see its docstring)."""
    def send_async(self, msg: Message) -> Future[Any]:
        """Broker.send_async (see its docstring)."""
    def send_batch(self, messages: Iterable[Message]) -> list[Any]:
        """Broker.send_batch (see its docstring)."""
