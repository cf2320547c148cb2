"""Record codec: decode (RecordIterator → MessageExt) over a buffer of 20,000 real 1 KiB-body records, the same with
the body CRC checked, the object-free scan (recovery's walk), and encode_batch of 1000 fresh messages."""
import pytest

from bench import workloads as W
from bench.workloads import record_rate as rate


@pytest.mark.benchmark(group="codec")
def test_decode_record_iterator(benchmark, record_buf):
    n, buf = record_buf
    assert benchmark(W.decode_all, buf) == n
    rate(benchmark, n, "records_per_s")


@pytest.mark.benchmark(group="codec")
def test_decode_record_iterator_check_crc(benchmark, record_buf):
    n, buf = record_buf
    assert benchmark(W.decode_all, buf, True) == n
    rate(benchmark, n, "records_per_s")


@pytest.mark.benchmark(group="codec")
def test_scan_records_check_crc(benchmark, record_buf):
    n, buf = record_buf
    assert benchmark(W.scan_all, buf, True) == n
    rate(benchmark, n, "records_per_s")


@pytest.mark.benchmark(group="codec")
def test_encode_batch_1000(benchmark):
    from rmqcore._encoder import EncodeBuffer, MessageEncoder
    enc = MessageEncoder()
    out = EncodeBuffer()

    def setup():
        return (W.make_messages(1000),), {}

    def encode(msgs):
        enc.encode_batch(msgs, out)
        return len(out)

    assert benchmark.pedantic(encode, setup=setup, rounds=50, warmup_rounds=2) == 1000
    rate(benchmark, 1000, "records_per_s")
