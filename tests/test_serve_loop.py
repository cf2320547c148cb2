"""`rmqcore serve --loop`: both fronts run on uvloop when it is installed (the server extra) and on the standard
library's asyncio loop when asked; the same requests get the same answers on either (every other serve test runs the
default, uvloop)."""
import sys

import pytest

from rmqcore._message import decode_message
from rmqcore.serve.cli import _loop_factory
from remoting_util import Client, RemotingProcess, pull, send_v2


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_send_long_poll_and_sigterm_on_either_loop(tmp_path, loop):
    pytest.importorskip("uvloop")
    store = str(tmp_path / "store")
    with RemotingProcess(store, args=("--loop", loop)) as s:
        c = Client(s.address)
        a = send_v2(c, "t-loop", b"first", queue_id=0)
        assert a.code == 0 and a.ext_fields["queueOffset"] == "0"
        # a parked pull (the loop's timers and events) answered by the next send, not by its suspend timeout
        consumer = Client(s.address)
        opaque = pull(consumer, "g-loop", "t-loop", 0, 1, suspend_ms=20_000)
        assert send_v2(c, "t-loop", b"second", queue_id=0).code == 0
        p = consumer.answer(opaque)
        assert p.code == 0 and bytes(decode_message(p.body).body) == b"second"
        assert p.ext_fields["nextBeginOffset"] == "2"
        # and one that finds nothing is answered PULL_NOT_FOUND when its suspend time is up
        p = consumer.answer(pull(consumer, "g-loop", "t-loop", 0, 2, suspend_ms=300))
        assert p.code == 19
        c.close()
        consumer.close()
        assert s.terminate() == 0
    with RemotingProcess(store, args=("--loop", loop)) as s:
        c = Client(s.address)
        p = c.answer(pull(c, "g-loop", "t-loop", 0, 0))
        assert p.code == 0 and p.ext_fields["maxOffset"] == "2"
        c.close()
        assert s.terminate() == 0


def test_loop_choice(monkeypatch):
    uvloop = pytest.importorskip("uvloop")
    assert _loop_factory("asyncio") is None
    assert _loop_factory("auto") is uvloop.new_event_loop
    assert _loop_factory("uvloop") is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)          # as if the server extra were not installed
    assert _loop_factory("auto") is None
    with pytest.raises(ValueError, match=r"--loop uvloop needs uvloop, of rmqcore's server extra"):
        _loop_factory("uvloop")
