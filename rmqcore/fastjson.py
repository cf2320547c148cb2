"""The text RocketMQ's config files hold: what fastjson 1.2.x writes and reads, as RocketMQ uses it.

RocketMQ serialises its config managers with ``JSON.toJSONString(obj, prettyFormat)`` (RemotingSerializable.toJson)
and fastjson's default features, which shape the text in ways Python's ``json`` does not:

* map keys that are not strings (``ConcurrentMap<Integer, Long>``) are written bare: ``{0:250,1:250}``;
* every map and every bean is written in sorted order (SortField: a TreeMap for maps, getters by name for beans);
* pretty format puts a newline and one tab per level before each *string* key and before the closing brace of a
  non-empty map, but none before an integer key, so an offset table reads ``{0:250,1:250\\n\\t\\t}``;
* an empty map is ``{}`` in both formats; enums are written by name; no spaces anywhere.

``loads`` reads that text (keys quoted or not, pretty or compact) and ``dumps`` writes it back byte for byte as
fastjson would. Beans are plain dicts here; ``Bean`` maps them to typed Python objects and keeps the fields it does
not know (a 5.x file's ``attributes``, ``stateVersion``, ...) so that a round trip loses nothing.
"""
from __future__ import annotations

import json
import re

__all__ = ["FastjsonDecodeError", "FieldError", "loads", "dumps", "dumps_map", "map_entry", "Raw", "Bean", "JAVA_INT", "JAVA_LONG"]

JAVA_INT = (-(1 << 31), (1 << 31) - 1)
JAVA_LONG = (-(1 << 63), (1 << 63) - 1)


class FastjsonDecodeError(ValueError):
    """Text that is not fastjson's JSON. ``line`` and ``column`` are 1-based; the column counts in the text with
    its bare integer keys quoted (``0:`` became ``"\\u00000":``), so it may lie a little right of the spot."""

    def __init__(self, message: str, line: int = 0, column: int = 0):
        super().__init__(f"{message} (line {line}, column {column})" if line else message)
        self.line = line
        self.column = column


class FieldError(ValueError):
    """A value of the wrong type or out of range. ``field`` is its dotted path inside the document."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


# One scan that steps over every string literal whole and catches a bare integer key (after "{" or ",", before
# ":"), so digits inside strings are never touched. Linear: the string branch cannot backtrack.
_BARE_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?[0-9]+)(\s*:)', re.S)


_BARE_KEY_OUTSIDE = re.compile(r'([{,]\s*)(-?[0-9]+)(\s*:)')
_SEP = "\x00"


def _pick_mark(text: str) -> str:
    """The control character bare keys are marked with: one whose JSON escape the text does not contain, so no
    string of the document itself can start with it (raw control characters are not valid inside strings)."""
    for i in range(10):
        if f"\\u000{i}" not in text:
            return chr(i)
    raise FastjsonDecodeError("the text escapes every control character U+0000..U+0009; not a config file")


def _quote_bare_keys(text: str, mark: str) -> str:
    """Quote every bare integer key as ``"<mark><digits>"``. Fast path: without escapes in the text, splitting on
    '"' gives the text outside strings at even positions; the keys found there are quoted and the pieces put back.
    Text with escapes (or an odd quote count, which json will refuse anyway) takes the one-scan path."""
    esc = f"\\u{ord(mark):04x}"

    def quote(m: re.Match) -> str:
        if m.lastindex == 1:                     # a string literal: unchanged
            return m.group(1)
        return f'{m.group(2)}"{esc}{m.group(3)}"{m.group(4)}'
    if "\\" in text or _SEP in text:
        return _BARE_KEY.sub(quote, text)
    parts = text.split('"')
    if len(parts) % 2 == 0:
        return _BARE_KEY.sub(quote, text)
    # split with groups gives [text, prefix, digits, colon, text, ...]: the digits are every 4th item from 2
    # (a substitution template would call back into Python per match on 3.11).
    pieces = _BARE_KEY_OUTSIDE.split(_SEP.join(parts[0::2]))
    pieces[2::4] = ['"' + esc + d + '"' for d in pieces[2::4]]
    parts[0::2] = "".join(pieces).split(_SEP)
    return '"'.join(parts)


def _reject_constant(name: str):
    raise FastjsonDecodeError(f"{name} is not a number fastjson writes")


def loads(text: str):
    """Parse fastjson text. Bare integer keys come back as ``int``, quoted keys as ``str``; a later duplicate key
    wins, as in fastjson. Raises FastjsonDecodeError with the line and column of the first problem."""
    mark = _pick_mark(text)
    quoted = _quote_bare_keys(text, mark)

    def pairs(items):
        # Keys that were bare integers become ints again; a quoted "0" stays a string (a topic may be named "0").
        out = {}
        for k, v in items:
            if k[:1] == mark:
                k = int(k[1:])                   # only _quote_bare_keys writes the mark, always before digits
            out[k] = v
        return out

    try:
        return json.loads(quoted, object_pairs_hook=pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise FastjsonDecodeError(e.msg, e.lineno, e.colno) from None
    except RecursionError:
        # json's C scanner counts its own depth and raises here long before the C stack is at risk.
        raise FastjsonDecodeError("nested too deeply") from None


_INT_RE = re.compile(r"-?[0-9]+")


def _is_int(s: str) -> bool:
    return _INT_RE.fullmatch(s) is not None


def _utf16_key(s: str):
    # Java's String.compareTo (TreeMap order) compares UTF-16 code units, not code points.
    return s.encode("utf-16-be")


def _sort_key(k):
    return (0, k, b"") if isinstance(k, int) else (1, 0, _utf16_key(k))


def _string(s: str) -> str:
    # fastjson escapes the quote, the backslash and control characters; everything else (non-ASCII too) is raw.
    return json.dumps(s, ensure_ascii=False)


_INT_ONLY = {int}
_STR_ONLY = {str}


class Raw(str):
    """Text already in fastjson's form, written as it is (a part of a document rendered once and kept, such as
    one topic's entry of topics.json: see ``dumps_map``)."""


def dumps(value, pretty: bool = False, level: int = 0) -> str:
    """Write ``value`` (dicts with str or int keys, lists, str, int, bool, None, Raw) as fastjson writes it;
    ``level``: the nesting depth the value sits at in its document (pretty format indents by it)."""
    out: list[str] = []
    _write(value, pretty, level, out)
    return "".join(out)


def map_entry(key: str, value_text: str, pretty: bool, level: int) -> tuple[bytes, str]:
    """One entry of a string-keyed map at ``level`` whose value is already written (``dumps(v, pretty, level +
    1)``), for ``dumps_map``: (its sort key, its text)."""
    inner = "\n" + "\t" * (level + 1) if pretty else ""
    return _utf16_key(key), inner + _string(key) + ":" + value_text


def dumps_map(entries, pretty: bool, level: int) -> Raw:
    """A string-keyed map at ``level`` from its entries (``map_entry``), in any order: the same text ``dumps`` gives
    for the map itself, so a caller that keeps each entry's text renders a large map without writing every value
    again."""
    if not entries:
        return Raw("{}")
    body = ",".join([text for _key, text in sorted(entries)])
    return Raw("{" + body + ("\n" + "\t" * level + "}" if pretty else "}"))


def _write(value, pretty: bool, level: int, out: list) -> None:
    if type(value) is Raw:
        out.append(value)
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        items = value.items()
        key_types = set(map(type, value))
        if key_types == _INT_ONLY and set(map(type, value.values())) == _INT_ONLY:
            # Integer-keyed maps of integers (offset tables): the hot case of a persist, written in one join.
            body = ",".join([f"{k}:{v}" for k, v in sorted(items)])
            out.append("{" + body + ("\n" + "\t" * level + "}" if pretty else "}"))
            return
        if key_types == _STR_ONLY:
            items = sorted(items, key=lambda kv: _utf16_key(kv[0]))
        else:
            items = sorted(items, key=lambda kv: _sort_key(kv[0]))
        out.append("{")
        inner = "\n" + "\t" * (level + 1)
        first = True
        for k, v in items:
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                if pretty:
                    out.append(inner)
                out.append(_string(k))
            else:
                out.append(str(int(k)))
            out.append(":")
            _write(v, pretty, level + 1, out)
        if pretty:
            out.append("\n" + "\t" * level)
        out.append("}")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, float):
        out.append(repr(value))
    elif isinstance(value, (list, tuple)):
        # Only unknown fields carried over from a newer file are lists; fastjson's collection writer adds no
        # layout inside them.
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _write(v, pretty, level + 1, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


# -- typed fields ------------------------------------------------------------------------------------------------

def check_int(value, field: str, lo: int, hi: int) -> int:
    """A Java int or long field: a JSON integer (not a bool, not a float) within [lo, hi]."""
    if type(value) is not int:
        raise FieldError(field, f"expected an integer, got {_show(value)}")
    if not lo <= value <= hi:
        raise FieldError(field, f"{value} is outside [{lo}, {hi}]")
    return value


def check_bool(value, field: str) -> bool:
    if type(value) is not bool:
        raise FieldError(field, f"expected true or false, got {_show(value)}")
    return value


def check_str(value, field: str) -> str:
    if type(value) is not str:
        raise FieldError(field, f"expected a string, got {_show(value)}")
    return value


def check_map(value, field: str) -> dict:
    if type(value) is not dict:
        raise FieldError(field, f"expected an object, got {_show(value)}")
    return value


def map_key_int(key, field: str, lo: int, hi: int) -> int:
    """An Integer map key: bare (int) or quoted digits, as fastjson accepts both."""
    if type(key) is str and _is_int(key):
        key = int(key)
    if type(key) is not int:
        raise FieldError(field, f"key {key!r} is not an integer")
    if not lo <= key <= hi:
        raise FieldError(field, f"key {key} is outside [{lo}, {hi}]")
    return key


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, dict) else "an object"
    return text if len(text) <= 40 else text[:37] + "..."


class Bean:
    """A Java bean as fastjson sees it: ``FIELDS`` lists (attribute, JSON name, kind, default). kind is "int",
    "long", "bool", "str", or a tuple of allowed enum names. Fields missing from a file keep their defaults (as
    fastjson leaves them); fields this version does not know are kept in ``extra`` and written back."""

    FIELDS: tuple = ()

    def __init__(self, **values):
        for attr, _name, _kind, default in self.FIELDS:
            setattr(self, attr, values.pop(attr, default))
        self.extra = dict(values.pop("extra", {}) or {})
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(values)}")

    @classmethod
    def from_json(cls, obj, where: str):
        obj = check_map(obj, where)
        known = {name: (attr, kind) for attr, name, kind, _d in cls.FIELDS}
        values = {}
        extra = {}
        for name, raw in obj.items():
            if name not in known:
                extra[name] = raw
                continue
            attr, kind = known[name]
            field = f"{where}.{name}"
            if raw is None:
                continue                     # fastjson leaves a field it reads as null at its default
            if kind == "int":
                values[attr] = check_int(raw, field, *JAVA_INT)
            elif kind == "long":
                values[attr] = check_int(raw, field, *JAVA_LONG)
            elif kind == "bool":
                values[attr] = check_bool(raw, field)
            elif kind == "str":
                values[attr] = check_str(raw, field)
            else:
                s = check_str(raw, field)
                if s not in kind:
                    raise FieldError(field, f"{s!r} is not one of {', '.join(kind)}")
                values[attr] = s
        return cls(**values, extra=extra)

    def to_json(self) -> dict:
        out = dict(self.extra)
        for attr, name, _kind, _default in self.FIELDS:
            out[name] = getattr(self, attr)
        return out

    def copy(self):
        values = {attr: getattr(self, attr) for attr, _n, _k, _d in self.FIELDS}
        return type(self)(**values, extra=dict(self.extra))

    def __eq__(self, other):
        return type(other) is type(self) and self.to_json() == other.to_json()

    def __repr__(self):
        fields = ", ".join(f"{attr}={getattr(self, attr)!r}" for attr, _n, _k, _d in self.FIELDS)
        return f"{type(self).__name__}({fields})"
