"""broker.conf: the properties file a RocketMQ broker starts with (``mqbroker -c broker.conf``), read into
BrokerConfig and StoreConfig.

RocketMQ's BrokerStartup loads the file with java.util.Properties.load and hands it to MixAll.properties2Object for
BrokerConfig, NettyServerConfig and MessageStoreConfig: each ``setXxx`` setter takes the property ``xxx``, parsed
with Integer.parseInt / Long.parseLong / Boolean.parseBoolean, a String trimmed. Here the same keys go to the
snake_case fields of the same names (``flushDiskType`` -> ``flush_disk_type``, ``brokerName`` -> ``broker_name``,
Java's spellings kept where they differ: ``transactionTimeOut``, ``warmMapedFileEnable``, ``checkCRCOnRecover``),
and ``brokerIP1`` / ``listenPort`` make the store host written into every record.

Stricter than Java where Java is silent: properties2Object swallows a value it cannot parse (the field keeps its
default without a word) and Boolean.parseBoolean reads anything but "true" as false; here such a value is a
ConfigFileError naming the file, the key and the line. Keys that set nothing here (other BrokerConfig fields,
namesrvAddr, brokerRole, storePathRootDir, ...) are returned, so the caller can name them all in one warning.

The syntax is Properties.load's: ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` comment lines;
a line ending in an odd number of backslashes continues on the next (its leading blanks dropped); escapes ``\\t
\\n \\r \\f \\uXXXX`` and a backslash before any other character (``\\=``, ``\\:``, ``\\ ``) for that character.
"""
from __future__ import annotations

import dataclasses
import re

from ..config import StoreConfig
from ..config_manager import file2string
from ..errors import ConfigFileError
from .broker_config import BrokerConfig

__all__ = ["load_broker_conf", "parse_properties", "apply_broker_conf"]

_INT = (-(1 << 31), (1 << 31) - 1)
_LONG = (-(1 << 63), (1 << 63) - 1)
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")

# Java setter names that are not the camelCase of rmqcore's field names.
_JAVA_NAMES = {
    "transaction_timeout": "transactionTimeOut",
    "warm_mapped_file_enable": "warmMapedFileEnable",
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
    "check_crc_on_recover": "checkCRCOnRecover",
    "enabled_append_prop_crc": "enabledAppendPropCRC",
    "broker_ip2": "brokerIP2",
}
# Fields with no broker.conf key: not Java settings (client_default_topic_queue_nums is the producer's),
# or made from other keys (store_host from brokerIP1:listenPort).
_NOT_KEYS = {"client_default_topic_queue_nums", "store_host", "extra"}
# Fields whose Java type is long (the rest of the numbers are int).
_LONG_FIELDS = {"broker_id", "transaction_timeout", "transaction_check_interval", "flush_delay_offset_interval"}
DEFAULT_LISTEN_PORT = 10911          # NettyServerConfig.listenPort


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


def _key_table() -> dict[str, tuple[str, str, str]]:
    """broker.conf key -> (which config, field name, kind)."""
    table = {}
    for which, cls in (("broker", BrokerConfig), ("store", StoreConfig)):
        for f in dataclasses.fields(cls):
            if f.name in _NOT_KEYS:
                continue
            kind = str(f.type)
            table[_JAVA_NAMES.get(f.name, _camel(f.name))] = (which, f.name, kind)
    return table


KEYS = _key_table()


# -- java.util.Properties --------------------------------------------------------------------------------------------

def _logical_lines(text: str):
    """(first physical line number, logical line) for each line that is not blank or a comment."""
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(line[:-1])
                if i >= len(lines):
                    break
                line = lines[i].lstrip(" \t\f")
                i += 1
                continue
            parts.append(line)
            break
        yield start + 1, "".join(parts)


def _unescape(s: str, line_no: int, path: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(s):
            break                      # a lone trailing backslash (end of file) is dropped, as Java does
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i:i + 4]
            if len(digits) < 4 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ConfigFileError(path, f"line {line_no}", f"malformed \\uxxxx encoding {s[i - 2:i + 4]!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c))
    return "".join(out)


def parse_properties(text: str, path: str = "broker.conf") -> dict[str, tuple[str, int]]:
    """Properties.load: {key: (value, line number)}; a later key wins, as in Java."""
    props: dict[str, tuple[str, int]] = {}
    for line_no, line in _logical_lines(text):
        # The key ends at the first unescaped '=', ':' or blank; then blanks, one '=' or ':', blanks.
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key_raw = line[:i]
        j = i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        props[_unescape(key_raw, line_no, path)] = (_unescape(line[j:], line_no, path), line_no)
    return props


# -- properties2Object ------------------------------------------------------------------------------------------------

def _convert(value: str, kind: str, field: str, path: str, where: str):
    if kind == "bool":
        v = value.strip().lower()
        if v not in ("true", "false"):
            raise ConfigFileError(path, where, f"{value!r} is not true or false")
        return v == "true"
    if kind == "int":
        v = value.strip()
        lo, hi = _LONG if field in _LONG_FIELDS else _INT
        if not _JAVA_INTEGER.fullmatch(v):
            raise ConfigFileError(path, where, f"{value!r} is not an integer "
                                               f"({'Long.parseLong' if field in _LONG_FIELDS else 'Integer.parseInt'})")
        n = int(v)
        if not lo <= n <= hi:
            raise ConfigFileError(path, where, f"{n} is outside a Java {'long' if field in _LONG_FIELDS else 'int'} "
                                               f"[{lo}, {hi}]")
        return n
    return value.strip()                 # properties2Object trims a String


def apply_broker_conf(props: dict[str, tuple[str, int]], path: str = "broker.conf",
                      broker_config: BrokerConfig | None = None, store_config: StoreConfig | None = None):
    """Set the fields ``props`` (parse_properties' result) name on copies of the given configs (the defaults when
    None) → (BrokerConfig, StoreConfig, unknown keys sorted). ConfigFileError names the key and line of a value
    that cannot be converted or that the config refuses."""
    values: dict[str, dict] = {"broker": {}, "store": {}}
    where_of = {}
    unknown = []
    for key, (raw, line_no) in props.items():
        entry = KEYS.get(key)
        if entry is None:
            if key not in ("brokerIP1", "listenPort"):
                unknown.append(key)
            continue
        which, field, kind = entry
        where = f"{key} (line {line_no})"
        values[which][field] = _convert(raw, kind, field, path, where)
        where_of[(which, field)] = where
    if "brokerIP1" in props or "listenPort" in props:
        # The store host every record carries: brokerIP1:listenPort, as the Java broker sets storeHost.
        host = props["brokerIP1"][0].strip() if "brokerIP1" in props else None
        port = DEFAULT_LISTEN_PORT
        if "listenPort" in props:
            raw, line_no = props["listenPort"]
            port = _convert(raw, "int", "listen_port", path, f"listenPort (line {line_no})")
            if not 0 < port < 65536:
                raise ConfigFileError(path, f"listenPort (line {line_no})", f"{port} is not a TCP port")
        if host is None:
            host = (store_config or StoreConfig()).store_host.rsplit(":", 1)[0]
        values["store"]["store_host"] = f"{host}:{port}"
        if "listenPort" in props and "haListenPort" not in props:
            # BrokerStartup: messageStoreConfig.setHaListenPort(nettyServerConfig.getListenPort() + 1). (4.9.7 does
            # it after reading the file, so there a haListenPort key is overridden; here it is kept, so a test can
            # ask for port 0.)
            values["store"]["ha_listen_port"] = port + 1
            where_of[("store", "ha_listen_port")] = f"listenPort (line {props['listenPort'][1]})"
        where_of[("store", "store_host")] = (f"brokerIP1 (line {props['brokerIP1'][1]})" if "brokerIP1" in props
                                             else f"listenPort (line {props['listenPort'][1]})")
    built = {}
    for which, base in (("broker", broker_config or BrokerConfig()), ("store", store_config or StoreConfig())):
        changes = values[which]
        # One field at a time, so an error names the key that caused it (the configs validate on construction).
        current = base
        for field, v in changes.items():
            try:
                current = dataclasses.replace(current, **{field: v})
            except (ValueError, TypeError) as e:
                raise ConfigFileError(path, where_of[(which, field)], str(e)) from None
        built[which] = current
    return built["broker"], built["store"], sorted(unknown)


def load_broker_conf(path: str, broker_config: BrokerConfig | None = None,
                     store_config: StoreConfig | None = None) -> tuple[BrokerConfig, StoreConfig, list[str]]:
    """Read the broker.conf at ``path`` → (BrokerConfig, StoreConfig, unknown keys). Each config starts from the
    one given (RocketMQ's defaults when None) with the file's keys applied. ``unknown keys``: keys that set no
    field here, sorted, for one warning naming them all. Raises ConfigFileError naming the path (missing,
    a directory or fifo, unreadable), and the key and line of a bad value."""
    text = file2string(path)
    if text is None:
        raise ConfigFileError(path, None, "no such file")
    return apply_broker_conf(parse_properties(text, path), path, broker_config, store_config)
