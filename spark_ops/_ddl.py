"""A Spark DDL schema string ("user string, total double") as a StructType, without Spark.

pyspark parses DDL in the JVM (``_parse_datatype_string`` needs a running session), and
the test harness runs without one; so the harness reads the strings that people pass to
``apply_operator(output_schema=...)`` here. It knows column lists ``name type [NOT NULL]
[COMMENT '...']`` (a ``:`` after the name allowed, a name in backquotes), a top-level
``struct<...>``, and the types boolean, tinyint/byte, smallint/short, int/integer,
bigint/long, float/real, double, decimal/dec/numeric[(p[, s])], string, binary, date,
timestamp, timestamp_ltz, timestamp_ntz, array<T>, map<K, V> and struct<...>, in any
case, as Spark's parser does. Anything else is a ValueError that names the string and what
was not understood, and says to pass a StructType.

    >>> parse_schema("user string, n bigint NOT NULL, tags array<string>").simpleString()
    'struct<user:string,n:bigint,tags:array<string>>'
"""
from __future__ import annotations

import re

_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|('(?:[^'\\]|\\.)*')|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")
_KINDS = ("name", "text", "word", "number", "mark")


def _simple_types() -> dict:
    from pyspark.sql import types as T
    return {"boolean": T.BooleanType, "tinyint": T.ByteType, "byte": T.ByteType, "smallint": T.ShortType,
            "short": T.ShortType, "int": T.IntegerType, "integer": T.IntegerType, "bigint": T.LongType,
            "long": T.LongType, "float": T.FloatType, "real": T.FloatType, "double": T.DoubleType,
            "string": T.StringType, "binary": T.BinaryType, "date": T.DateType, "timestamp": T.TimestampType,
            "timestamp_ltz": T.TimestampType, "timestamp_ntz": T.TimestampNTZType}


def parse_schema(text: str):
    """``text`` (a DDL column list, or ``struct<...>``) as a pyspark StructType. O(len(text));
    ValueError naming what was not understood."""
    return _Parser(text).schema()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []      # (kind, text, offset)
        pos, end = 0, len(text.rstrip())
        while pos < end:
            m = _TOKEN.match(text, pos)
            if m is None:
                raise self._error(f"unexpected {text[pos:].strip()[:20]!r}", pos)
            kind = next(k for k, g in zip(_KINDS, m.groups()) if g is not None)
            self.tokens.append((kind, m.group(_KINDS.index(kind) + 1), m.start(_KINDS.index(kind) + 1)))
            pos = m.end()
        self.i = 0

    def _error(self, what: str, offset: int | None = None) -> ValueError:
        if offset is None:
            offset = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        return ValueError(f"cannot read the schema {self.text!r} without Spark: {what} at character {offset}; "
                          f"pass a pyspark StructType instead")

    def _peek(self, ahead: int = 0) -> str | None:
        j = self.i + ahead
        return self.tokens[j][1] if j < len(self.tokens) else None

    def _take(self, *kinds: str) -> str:
        if self.i >= len(self.tokens):
            raise self._error("the string ends early")
        kind, value, _ = self.tokens[self.i]
        if kinds and kind not in kinds:
            raise self._error(f"unexpected {value!r}")
        self.i += 1
        return value

    def _expect(self, mark: str) -> None:
        if self._peek() != mark:
            raise self._error(f"expected {mark!r}" + ("" if self._peek() is None else f", not {self._peek()!r}"))
        self.i += 1

    def _word(self, *words: str) -> bool:
        """Whether the next token is one of ``words`` (any case); taken if so."""
        nxt = self._peek()
        if nxt is not None and self.tokens[self.i][0] == "word" and nxt.lower() in words:
            self.i += 1
            return True
        return False

    def schema(self):
        from pyspark.sql.types import StructType
        if self._peek() is not None and self._peek().lower() == "struct" and self._peek(1) == "<":
            out = self.type()
        else:
            out = StructType(self.fields(closing=None))
        if self.i < len(self.tokens):
            raise self._error(f"unexpected {self._peek()!r}")
        return out

    def fields(self, closing: str | None) -> list:
        from pyspark.sql.types import StructField
        out = []
        while True:
            token = self._take("name", "word")
            name = token[1:-1].replace("``", "`") if token.startswith("`") else token
            if self._peek() == ":":
                self.i += 1
            typ = self.type()
            nullable = True
            if self._word("not"):
                if not self._word("null"):
                    raise self._error("expected NULL after NOT")
                nullable = False
            metadata = {}
            if self._word("comment"):
                text = self._take("text")
                metadata["comment"] = re.sub(r"\\(.)", r"\1", text[1:-1])
            out.append(StructField(name, typ, nullable, metadata or None))
            if self._peek() != ",":
                break
            self.i += 1
        if self._peek() != closing:
            raise self._error(f"unexpected {self._peek()!r}")
        return out

    def type(self):
        from pyspark.sql import types as T
        word = self._take("word").lower()
        simple = _simple_types().get(word)
        if simple is not None:
            return simple()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self._peek() == "(":
                self.i += 1
                precision = int(self._take("number"))
                if self._peek() == ",":
                    self.i += 1
                    scale = int(self._take("number"))
                self._expect(")")
            return T.DecimalType(precision, scale)
        if word == "array":
            self._expect("<")
            item = self.type()
            self._expect(">")
            return T.ArrayType(item, True)
        if word == "map":
            self._expect("<")
            key = self.type()
            self._expect(",")
            value = self.type()
            self._expect(">")
            return T.MapType(key, value, True)
        if word == "struct":
            self._expect("<")
            fields = [] if self._peek() == ">" else self.fields(closing=">")
            self._expect(">")
            return T.StructType(fields)
        self.i -= 1
        raise self._error(f"unknown type {word!r}")
