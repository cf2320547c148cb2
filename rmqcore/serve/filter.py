"""SQL92 filters: RocketMQ's property selector (rocketmq-filter's SelectorParser, from ActiveMQ's), over a
message's properties (user properties and TAGS, KEYS, ... as stored).

Grammar: ``OR``, ``AND``, ``NOT``, parentheses; comparisons ``= <> > >= < <=``; ``[NOT] BETWEEN a AND b``;
``[NOT] IN ('a', 'b')``; ``IS [NOT] NULL``; 5.x's ``[NOT] CONTAINS``, ``[NOT] STARTSWITH``, ``[NOT] ENDSWITH``;
literals: strings in single quotes ('' is a quote), integers (longs), decimals, ``TRUE``, ``FALSE``, ``NULL``.
Logic is three-valued as SQL's: a comparison with a missing property is unknown, and a message matches only when
the whole expression is TRUE. Property values are text; against a number literal a value is read as a number
(unknown when it is not one), as RocketMQ compares numeric properties.
"""
from __future__ import annotations

import re

MAX_EXPRESSION = 4096
# Parentheses and NOTs nested deeper than this are refused (ILLEGAL_FILTER_EXPRESSION): the parser and the
# evaluator recurse once a level (the parser a few frames), and past Python's recursion limit (1000) an expression
# of 4096 characters would fail as an error of the server. AND and OR chains do not nest: they are n-ary nodes.
MAX_NESTING = 100


class FilterError(ValueError):
    """An expression that does not parse: the message says where."""


_TOKEN = re.compile(r"""
    \s*(?:
      (?P<str>'(?:[^']|'')*')
     |(?P<num>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[lL]?)
     |(?P<op><>|>=|<=|=|>|<|\(|\)|,)
     |(?P<word>[A-Za-z_$][A-Za-z0-9_.$]*)
    )""", re.X)

KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS", "STARTSWITH",
            "ENDSWITH"}


def _tokens(text: str):
    pos = 0
    out = []
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterError(f"unexpected character {text[pos:].lstrip()[:1]!r} at {pos} in {text!r}")
        pos = m.end()
        if m.group("str") is not None:
            out.append(("str", m.group("str")[1:-1].replace("''", "'")))
        elif m.group("num") is not None:
            s = m.group("num").rstrip("lL")
            out.append(("num", float(s) if any(c in s for c in ".eE") else int(s)))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            w = m.group("word")
            out.append(("kw", w.upper()) if w.upper() in KEYWORDS else ("id", w))
    out.append(("end", None))
    return out


class _Parser:
    def __init__(self, text):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    def _nest(self):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise FilterError(f"SQL filter expression nests parentheses and NOTs more than {MAX_NESTING} deep")

    def peek(self, kind=None, value=None):
        k, v = self.toks[self.i]
        return (kind is None or k == kind) and (value is None or v == value)

    def take(self, kind=None, value=None):
        k, v = self.toks[self.i]
        if (kind is not None and k != kind) or (value is not None and v != value):
            want = value or kind
            raise FilterError(f"expected {want} at token {self.i + 1} ({v!r}) in {self.text!r}")
        self.i += 1
        return v

    def parse(self):
        node = self.or_()
        if not self.peek("end"):
            raise FilterError(f"unexpected {self.toks[self.i][1]!r} at token {self.i + 1} in {self.text!r}")
        return node

    def or_(self):
        terms = [self.and_()]
        while self.peek("kw", "OR"):
            self.take()
            terms.append(self.and_())
        return terms[0] if len(terms) == 1 else ("or", tuple(terms))

    def and_(self):
        terms = [self.not_()]
        while self.peek("kw", "AND"):
            self.take()
            terms.append(self.not_())
        return terms[0] if len(terms) == 1 else ("and", tuple(terms))

    def not_(self):
        if self.peek("kw", "NOT"):
            self.take()
            self._nest()
            node = ("not", self.not_())
            self.depth -= 1
            return node
        return self.predicate()

    def value(self):
        k, v = self.toks[self.i]
        if k in ("str", "num", "id"):
            self.i += 1
            return ("prop", v) if k == "id" else ("lit", v)
        if k == "kw" and v in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            return ("lit", {"TRUE": True, "FALSE": False, "NULL": None}[v])
        if k == "op" and v == "(":
            self.i += 1
            self._nest()
            node = self.or_()
            self.take("op", ")")
            self.depth -= 1
            return node
        raise FilterError(f"expected a value at token {self.i + 1} ({v!r}) in {self.text!r}")

    def predicate(self):
        left = self.value()
        if self.peek("op") and self.toks[self.i][1] in ("=", "<>", ">", ">=", "<", "<="):
            op = self.take()
            return ("cmp", op, left, self.value())
        negate = False
        if self.peek("kw", "IS"):
            self.take()
            if self.peek("kw", "NOT"):
                self.take()
                negate = True
            self.take("kw", "NULL")
            return ("notnull" if negate else "isnull", left)
        if self.peek("kw", "NOT"):
            self.take()
            negate = True
        if self.peek("kw", "BETWEEN"):
            self.take()
            lo = self.value()
            self.take("kw", "AND")
            node = ("between", left, lo, self.value())
        elif self.peek("kw", "IN"):
            self.take()
            self.take("op", "(")
            items = [self.take("str")]
            while self.peek("op", ","):
                self.take()
                items.append(self.take("str"))
            self.take("op", ")")
            node = ("in", left, frozenset(items))
        elif self.peek("kw") and self.toks[self.i][1] in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
            op = self.take()
            node = ("str", op, left, ("lit", self.take("str")))
        elif negate:
            raise FilterError(f"NOT must be followed by BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH here, "
                              f"in {self.text!r}")
        else:
            return left
        return ("not", node) if negate else node


def _num(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return None
    return None


def _eval(node, props):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "prop":
        return props.get(node[1])
    if kind == "or":                        # SQL's three-valued OR over every term
        out = False
        for term in node[1]:
            v = _eval(term, props)
            if v is True:
                return True
            if v is None:
                out = None
        return out
    if kind == "and":
        out = True
        for term in node[1]:
            v = _eval(term, props)
            if v is False:
                return False
            if v is None:
                out = None
        return out
    if kind == "not":
        v = _eval(node[1], props)
        return None if v is None else not v
    if kind == "isnull":
        return _eval(node[1], props) is None
    if kind == "notnull":
        return _eval(node[1], props) is not None
    if kind == "cmp":
        op, a, b = node[1], _eval(node[2], props), _eval(node[3], props)
        if a is None or b is None:
            return None
        if isinstance(a, bool) or isinstance(b, bool):
            if op not in ("=", "<>"):
                return None
            a = a if isinstance(a, bool) else {"true": True, "false": False}.get(str(a).lower())
            b = b if isinstance(b, bool) else {"true": True, "false": False}.get(str(b).lower())
            if a is None or b is None:
                return None
        elif isinstance(a, (int, float)) or isinstance(b, (int, float)):
            a, b = _num(a), _num(b)
            if a is None or b is None:
                return None
        elif op not in ("=", "<>"):
            return None                      # strings compare for equality only
        return {"=": a == b, "<>": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]
    if kind == "between":
        v, lo, hi = _num(_eval(node[1], props)), _num(_eval(node[2], props)), _num(_eval(node[3], props))
        if v is None or lo is None or hi is None:
            return None
        return lo <= v <= hi
    if kind == "in":
        v = _eval(node[1], props)
        return None if v is None else str(v) in node[2]
    if kind == "str":
        v, s = _eval(node[2], props), node[3][1]
        if v is None:
            return None
        v = str(v)
        return {"CONTAINS": s in v, "STARTSWITH": v.startswith(s), "ENDSWITH": v.endswith(s)}[node[1]]
    raise AssertionError(kind)


def compile_filter(expression: str):
    """``expression`` → fn(message) -> bool (True only when the expression is TRUE for the message's
    properties). Raises FilterError for an expression that does not parse."""
    if not isinstance(expression, str) or not expression.strip():
        raise FilterError("SQL filter expression is empty")
    if len(expression) > MAX_EXPRESSION:
        raise FilterError(f"SQL filter expression is {len(expression)} characters, more than {MAX_EXPRESSION}")
    tree = _Parser(expression).parse()

    def match(message) -> bool:
        return _eval(tree, message.properties) is True
    match.expression = expression
    return match
