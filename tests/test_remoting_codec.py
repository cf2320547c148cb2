"""The remoting front's compiled codec (rmqcore/remoting/_remoting_codec.pyx) against its Python reference
(rmqcore/remoting/remoting_command.py): equal commands, equal errors (type and text) and equal answer bytes for any
input, and frames split anywhere decode the same."""
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqcore.remoting import _remoting_codec as fast
from rmqcore.remoting import remoting_command as ref
from rmqcore.remoting.remoting_command import FrameError, RemotingCommand

texts = st.text(max_size=12)
ext_maps = st.dictionaries(texts.filter(lambda s: len(s.encode()) < 0x7FFF), texts, max_size=5)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
commands = st.builds(
    RemotingCommand, code=st.integers(-(1 << 15), (1 << 15) - 1), language=st.sampled_from(ref.LANGUAGES),
    version=st.integers(-(1 << 15), (1 << 15) - 1), opaque=int32, flag=st.integers(0, 3),
    remark=st.none() | texts, ext_fields=ext_maps, serialize_type=st.sampled_from([ref.JSON, ref.ROCKETMQ]),
    body=st.binary(max_size=40))


def _as_read(c):
    """What a reader gets back: the binary layout cannot tell an empty remark from none (RocketMQSerializable
    reads a zero length as null)."""
    t = c.astuple()
    if c.serialize_type == ref.ROCKETMQ and c.remark == "":
        t = t[:5] + (None,) + t[6:]
    return t


def _both(buf, max_frame=ref.MAX_FRAME):
    out = []
    for mod in (ref, fast):
        try:
            cmds, used = mod.decode_frames(buf, max_frame)
            out.append(("ok", [c.astuple() for c in cmds], used))
        except FrameError as e:
            out.append(("error", str(e)))
    assert out[0] == out[1]
    return out[0]


@given(st.lists(commands, max_size=4))
def test_well_formed_frames_decode_as_sent(cmds):
    buf = b"".join(ref.encode_request(c) for c in cmds)
    result = _both(buf)
    assert result == ("ok", [_as_read(c) for c in cmds], len(buf))


@given(st.lists(commands, min_size=1, max_size=3), st.data())
def test_a_stream_split_anywhere_gives_the_same_commands(cmds, data):
    buf = b"".join(ref.encode_request(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(buf)), max_size=6)))
    dec = fast.FrameDecoder()
    got = []
    last = 0
    for cut in cuts + [len(buf)]:
        got += dec.feed(buf[last:cut])
        last = cut
    assert [c.astuple() for c in got] == [_as_read(c) for c in cmds]
    assert dec.pending == 0


@given(st.binary(max_size=80))
def test_any_bytes_give_equal_answers_never_a_crash(buf):
    _both(buf)


@given(commands, st.data())
def test_damaged_frames_give_equal_errors(cmd, data):
    buf = bytearray(ref.encode_request(cmd))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    _both(bytes(buf))


@given(st.dictionaries(st.sampled_from(["code", "language", "version", "opaque", "flag", "remark", "extFields"]),
                       st.none() | st.booleans() | st.integers(-(1 << 33), 1 << 33) | texts
                       | st.dictionaries(texts, st.none() | st.booleans() | st.integers() | texts | st.floats())))
def test_json_headers_of_any_shape(h):
    header = json.dumps(h).encode()
    _both(struct.pack(">iI", 4 + len(header), len(header)) + header)


# The compiled decoder reads the common header shape in one pass and leaves every other header to json.loads
# (_remoting_codec._json_fast): headers written every way a client may write them, and the border cases of that
# pass, decode as the reference decodes them, errors included.
any_texts = st.text(max_size=10) | st.sampled_from(["KEYS\x01k0\x02UNIQ_KEY\x01FD00\x02WAIT\x01true", "\ud83d\ude00",
                                                    "a\"b\\c/", "\x00\x1f\x7f", "é€𝄞"])
header_values = st.none() | st.booleans() | st.integers(-(1 << 32), 1 << 32) | any_texts | st.floats(allow_nan=False)
headers = st.fixed_dictionaries(
    {"code": st.integers(-(1 << 31) - 2, (1 << 31) + 1) | header_values},
    optional={"language": st.sampled_from(["JAVA", "CPP", "PYTHON"]) | header_values,
              "version": st.integers(-5, 500) | header_values, "opaque": int32 | header_values,
              "flag": st.integers(0, 3) | header_values, "remark": any_texts | header_values,
              "serializeTypeCurrentRPC": st.just("JSON") | header_values,
              "extFields": st.none() | st.dictionaries(any_texts, any_texts | header_values, max_size=6)})


@given(headers, st.booleans(), st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]), st.booleans())
def test_json_headers_as_any_client_writes_them(h, ascii_only, separators, padded):
    header = json.dumps(h, ensure_ascii=ascii_only, separators=separators)
    if padded:
        header = f" \r\n{header}\t "
    raw = header.encode("utf-8", "surrogatepass")
    _both(struct.pack(">iI", 4 + len(raw), len(raw)) + raw)


@pytest.mark.parametrize("header", [
    b'{"code":310,"extFields":{"a":"x","a":"y"},"extFields":{"b":"z"},"code":11}',      # the last wins
    b'{"code":01}', b'{"code":-0}', b'{"code":1.0}', b'{"code":1e2}', b'{"code":2147483648}',
    b'{"code":-2147483649}', b'{"code":99999999999999999999}', b'{"code":"310"}', b'{"code":null}',
    b'{"code":1,"extFields":{"k":"\\ud800"}}', b'{"code":1,"extFields":{"k":"\\udc00x"}}',
    b'{"code":1,"extFields":{"k":"\\ud83d\\ude00\\u00e9\\u20ac\\u0001\\n\\/"}}',
    b'{"code":1,"extFields":{"k":"\\x"}}', b'{"code":1,"extFields":{"k":"\\u12"}}',
    b'{"code":1,"other":"\xff"}', b'{"code":1,"other":"\xed\xa0\x80"}', b'{"code":1,"remark":"\xc3\xa9"}',
    b'{"code":1,"extFields":{"k":null,"j":1,"t":true}}', b'{"code":1,"extFields":{}}', b'{"code":1,}',
    b'{"code":1} x', b'{"code":1', b'{"code" 1}', b'{"code":1,"language":null,"remark":null}',
    b'{"code":1,"other":{"x":[1,2]}}', b'{"\\u0063ode":1}', b'{}', b' {"code":1} ', b'{"code":1,"k":"a\tb"}',
])
def test_json_header_borders(header):
    _both(struct.pack(">iI", 4 + len(header), len(header)) + header)


@given(st.sampled_from([ref.JSON, ref.ROCKETMQ]), st.integers(0, 400), int32, st.integers(0, 3),
       st.none() | texts, ext_maps, st.integers(0, 1000))
def test_answers_are_written_alike_and_read_back(stype, code, opaque, flag, remark, ext, body_len):
    a = ref.encode_header(stype, code, opaque, flag, remark, ext, body_len)
    assert fast.encode_header(stype, code, opaque, flag, remark, ext, body_len) == a
    frame = a + b"\0" * body_len
    (cmd,), used = ref.decode_frames(frame)
    assert used == len(frame)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.serialize_type, cmd.version) == \
        (code, opaque, flag, None if stype == ref.ROCKETMQ and remark == "" else remark, ext, stype,
         ref.BROKER_VERSION)


def test_the_limits_named():
    with pytest.raises(FrameError, match=r"frame length 17000000 is not in \[4, 16777216\]"):
        fast.FrameDecoder().feed(struct.pack(">i", 17_000_000))
    with pytest.raises(FrameError, match="header length 100 runs past the frame"):
        fast.decode_frames(struct.pack(">iI", 8, 100) + b"xxxx")
    with pytest.raises(FrameError, match="header is not JSON"):
        fast.decode_frames(struct.pack(">iI", 7, 3) + b"{x}")
    with pytest.raises(FrameError, match="'code' is missing"):
        fast.decode_frames(struct.pack(">iI", 6, 2) + b"{}")
    with pytest.raises(FrameError, match="serialize type 2"):
        fast.decode_frames(struct.pack(">iI", 6, (2 << 24) | 2) + b"{}")


# The compiled encoder writes printable ASCII strings itself and leaves the rest to json.dumps: strings at that
# border (quotes, backslashes, control characters, DEL, one non-ASCII character) must come out as the reference's.
ascii_texts = st.text(alphabet=st.characters(max_codepoint=0x80), max_size=12)


@given(st.none() | ascii_texts, st.dictionaries(ascii_texts, ascii_texts, max_size=5))
def test_answers_with_ascii_strings_at_the_escaping_border_are_written_alike(remark, ext):
    assert fast.encode_header(ref.JSON, 0, 7, 1, remark, ext, 0) == ref.encode_header(ref.JSON, 0, 7, 1, remark, ext, 0)
