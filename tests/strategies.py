"""Hypothesis strategies and record comparison shared by the differential tests (codec, segment decoder, put_arrow,
batch properties)."""
import ipaddress

from hypothesis import strategies as st

hosts = st.one_of(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255),
              st.integers(0, 65535)).map(lambda t: f"{t[0]}.{t[1]}.{t[2]}.{t[3]}:{t[4]}"),
    st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 65535)).map(
        lambda t: f"[{ipaddress.IPv6Address(t[0])}]:{t[1]}"),
)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)


def property_text(max_size: int):
    """Property names/values: any text RocketMQ accepts (no \\x01/\\x02 separators, no lone surrogates)."""
    return st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02"),
                   max_size=max_size)


# Topics as RocketMQ's TopicValidator allows them (^[%|a-zA-Z0-9_-]+$, at most 127 bytes): the decoders treat any
# other topic read from a file as corruption.
TOPIC_ALPHABET = "%|_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=127)


def without_store_time(m):
    """A stored record's bytes with its store time and the __CRC32# digits that cover it zeroed: what two puts of
    the same message give alike."""
    raw = bytearray(bytes(m.record()))
    at = 56 if not m.sys_flag & 0x10 else 68          # after the born host (IPv4 8 bytes, IPv6 20)
    raw[at:at + 8] = bytes(8)
    assert raw[-20:-11] == b"__CRC32#\x01" and raw[-1] == 2
    raw[-11:-1] = bytes(10)
    return bytes(raw)
