"""CSV: a list of rows of one flat type, a header row naming the fields (stdlib csv)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import date, datetime, time
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from typing_extensions import TypeForm

from goflux.codecs._shape import Field, shape_of
from goflux.codecs._typed import Typed, as_bytes, go_float, one_line

__all__ = ("CsvCodec",)

T = TypeVar("T")


# What Go's unicode.IsSpace calls space: a field starting with one is quoted.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# A field Go's Writer.fieldNeedsQuotes quotes: a comma, quote, CR or LF in it, a space
# first, or the whole field is Postgres's end-of-data marker \. (never the empty field).
_NEEDS_QUOTES = re.compile(f'[",\r\n]|^[{_GO_SPACE}]|^\\\\\\.$')
# The same over a row's fields joined by commas: nothing to quote if it finds nothing
# (and the row has no more commas than separators).
_ROW_NEEDS_QUOTES = re.compile(f'["\r\n]|(?:^|,)(?:[{_GO_SPACE}]|\\\\\\.(?:,|$))')
# Where the csv module's writer (quoting a comma, quote or LF) may differ from Go's (a
# field starting with LF is quoted by both), but for a CR (found by ``in``): a field
# starting with a space or that is \., after a separator; the text's first field apart.
# It starts with a character class, so the search skips ahead quickly.
_INLINE_SPACE = _GO_SPACE.replace("\n", "")
_GO_QUOTES_MORE = re.compile(f"[,\n](?:[{_INLINE_SPACE}]|\\\\\\.(?:[,\n]|$))")
_GO_QUOTES_FIRST = re.compile(f"[{_INLINE_SPACE}]|\\\\\\.(?:[,\n]|$)")
# What the csv module writes as Go does: text, int (its repr), None (an empty field).
_AS_IS = frozenset({str, int, type(None)})


def _quoted(field: str) -> str:
    if _NEEDS_QUOTES.search(field):
        return '"' + field.replace('"', '""') + '"'
    return field


def _line(fields: list[str]) -> str:
    """A record as Go's csv.Writer writes it, each field quoted only if it needs it."""
    line = ",".join(fields)
    if line.count(",") == len(fields) - 1 and not _ROW_NEEDS_QUOTES.search(line):
        # One empty field would be an empty line, which readers skip (Go's too).
        return line if line or len(fields) != 1 else '""'
    return ",".join(map(_quoted, fields))


def _allow_fields_of(size: int) -> None:
    """Let the csv module read fields as long as ``size`` characters.

    Its limit (128 KiB unless set) is process-wide: it is raised, never lowered,
    so other readers in the process only lose an error.
    """
    if size > csv.field_size_limit():
        try:
            csv.field_size_limit(size)
        except OverflowError:  # a C long of 32 bits
            csv.field_size_limit(2**31 - 1)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _none(value: None) -> str:
    return ""


# Text of the types pydantic dumps most, by exact type (a dict lookup, not a chain).
_CELL: dict[type, Callable[[Any], str]] = {
    str: str,
    int: int.__repr__,
    float: go_float,
    bool: _bool,
    type(None): _none,
    datetime: datetime.isoformat,
    date: date.isoformat,
}


def _floats(values: list[float]) -> list[str]:
    """A column of floats as Go writes them: repr, in C, where it is Go's text."""
    texts = list(map(float.__repr__, values))
    joined = ",".join(texts)
    # repr has no exponent from 1e-4 to 1e16, Go's text none below 1e6; nan, inf
    if "n" in joined or "e" in joined or max(values) >= 1e6 or min(values) <= -1e6:
        return list(map(go_float, values))  # one by one
    if ".0," in joined + ",":
        return [text[:-2] if text.endswith(".0") else text for text in texts]
    return texts


def _plain(texts: list[str]) -> bool:
    r"""Whether the csv module quotes each of ``texts`` as Go's writer does.

    None starts with a space, holds a CR or ``\.`` (checked a column at a time, in C).
    """
    joined = "".join(texts)
    return (
        joined.isascii()  # Go's other spaces are not ASCII
        and "\r" not in joined
        and "\\." not in joined
        and min(filter(None, texts), default="!") >= "!"  # ASCII spaces sort first
    )


def _column(values: list[Any]) -> tuple[list[Any], bool]:
    """A column's values as the csv module should write them, and if it writes all as Go.

    Text, or int and None, which it writes as Go does. The types are looked at once
    per column, so that a column of one type is turned into text in one ``map``
    rather than a lookup per field.
    """
    kinds = set(map(type, values))
    if kinds <= _AS_IS:
        if str not in kinds:
            return values, True
        return values, _plain(values if len(kinds) == 1 else [v for v in values if type(v) is str])
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is float:
            return _floats(values), True
        if kind is bool:
            return ["true" if value else "false" for value in values], True
        text = _CELL.get(kind)
        if text is not None:  # dates: never a space first, a CR or \\.
            return list(map(text, values)), True
    cells = [cell if type(cell) in _AS_IS else _cell(cell) for cell in values]
    return cells, _plain([cell for cell in cells if type(cell) is str])


def _cell(value: object) -> str:
    """A field as text, as Go's strconv writes it."""
    text = _CELL.get(type(value))
    if text is not None:
        return text(value)
    if isinstance(value, time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()  # as Go writes a []byte: the text it holds
    if isinstance(value, Enum):
        return _cell(value.value)
    for base in (bool, str, int, float, datetime, date):  # subclasses of these
        if isinstance(value, base):
            return _CELL[base](value)
    return _cell(pydantic_core.to_jsonable_python(value))


class CsvCodec(Generic[T]):
    r"""CSV codec for a list of rows of a flat type: ``CsvCodec(Row)`` is a ``Codec[list[Row]]``.

    ``CsvCodec(Row)`` is typed ``CsvCodec[Row]``; it encodes a ``list[Row]`` and
    decodes one. ``Row`` is a model, dataclass or TypedDict whose fields are single
    values (text, numbers, booleans, dates, enums; not lists or models). The first
    line is a header of the field names (aliases where they have one), in
    declaration order, then a line per row; lines end in ``\\n`` and each field is
    quoted only where Go's ``encoding/csv`` writer quotes it (a comma, quote, CR or
    LF in it, a space first, or the field ``\\.``; never an empty field, except a
    row of one empty field, written ``""`` so that readers do not skip it as a blank
    line): what goencode's ``csv`` codec passes through as ``[][]string``. Values
    are written as Go's ``strconv`` writes them (``true``, ``1e+06``, ``NaN``),
    datetimes as RFC 3339, an enum or ``Literal`` as its value, ``None`` as an empty
    field. An empty list is the header alone. A field that accepts ``None`` cannot
    hold ``""`` (both would be an empty field): encoding refuses it. Nor can a field
    typed as a union of single values hold one whose text reads back as another
    member (``1`` in ``int | str`` reads back as ``"1"``): encoding refuses it,
    naming the row and field.

    Decoding reads the header and maps columns by name (any order; unknown columns
    are ignored, a missing one takes the field's default), skips empty lines as Go's
    reader does, refuses rows whose field count differs from the header's and bad
    quoting, reads an empty field as ``None`` where the field accepts ``None``, the
    text of an enum or ``Literal`` value as that value, and validates every row with
    pydantic's lax mode (``"12"`` into an ``int`` field); an error names the row
    (``3.qty``, counting rows from 0 after the header). A UTF-8 byte order mark is
    skipped. Empty input is an empty list. Fields may be as long as the input (the
    ``csv`` module's process-wide ``field_size_limit`` is raised to the input's
    length when it is lower, never lowered).

    Raises:
        TypeError: pydantic cannot build a schema for the type, or it is not a flat
            row type.
    """

    __slots__ = (
        "_by_wire",
        "_header",
        "_header_plain",
        "_nullable",
        "_row_check",
        "_row_name",
        "_typed",
        "_unions",
    )

    content_type: ClassVar[str] = "text/csv; charset=utf-8"
    """The MIME type of what it writes (RFC 4180, header present)."""

    def __init__(self, type_: TypeForm[T], /) -> None:
        row = Typed(type_, "CsvCodec")
        shape = shape_of(dict(row.adapter.core_schema))
        if shape.kind != "fields":
            raise TypeError(
                f"CsvCodec needs a row type with fields (a model, dataclass or TypedDict), "
                f"not {row.name}"
            )
        nested = [wire for wire, f in shape.fields.items() if f.shape.kind != "leaf"]
        if nested:
            raise TypeError(
                f"CsvCodec({row.name}): a CSV field holds one value, but "
                f"{', '.join(nested)} {'holds' if len(nested) == 1 else 'hold'} "
                "a list, mapping or model"
            )
        self._row_name = row.name
        self._typed = Typed(list[type_], "CsvCodec")  # type: ignore[valid-type]
        self._typed.name = f"list[{row.name}]"
        # Rows that are model or dataclass instances are checked one by one (cheap);
        # validating the whole list first would double the cost of encoding.
        self._row_check = row.check_instance
        if row.check_instance is not None:
            self._typed.prevalidate = False
        self._header = list(shape.fields)
        self._header_plain = _plain(self._header)
        self._by_wire: dict[str, Field] = dict(shape.fields)
        # An empty field reads as None where the field accepts None: "" cannot go there.
        self._nullable = [wire for wire, f in shape.fields.items() if f.nullable]
        # Unions of leaves (int | str): each value's text is read back before it is sent.
        self._unions = [
            (wire, f.shape.union) for wire, f in shape.fields.items() if f.shape.union is not None
        ]

    @property
    def type(self) -> TypeForm[T]:
        """The row type this codec was built for."""
        return self._typed.type.__args__[0]  # type: ignore[attr-defined, no-any-return]

    @property
    def header(self) -> list[str]:
        """The header row it writes: the field names, aliases where they have one."""
        return list(self._header)

    def __repr__(self) -> str:
        return f"CsvCodec({self._row_name})"

    def encode(self, value: list[T], /) -> bytes:
        """Return the CSV of the rows in ``value``: the header, then a line per row.

        Raises:
            EncodeError: ``value`` is not a list of valid rows, or holds what CSV
                cannot carry or read back (a lone surrogate, an integer longer than
                Python writes as text, ``""`` in a field that accepts ``None``).
        """
        typed = self._typed
        check = self._row_check
        if check is not None:
            if not isinstance(value, list | tuple):
                typed.encode_error(value, f"expected a list of {self._row_name}")
            for index, row in enumerate(value):
                if not isinstance(row, check):
                    typed.encode_error(
                        value, f"row {index} is a {type(row).__name__}, not a {self._row_name}"
                    )
        rows = typed.to_python(value)
        header = self._header
        for wire in self._nullable:
            for index, row in enumerate(rows):
                if row.get(wire) == "":
                    typed.encode_error(
                        value,
                        f"{index}.{wire}: CSV writes '' and None alike (an empty field), "
                        "and reads it as None where the field accepts None",
                    )
        if self._unions:
            self._check_unions(value, rows)
        try:
            columns: list[list[Any]] = []
            plain = self._header_plain
            for wire in header:
                column, column_plain = _column([row.get(wire) for row in rows])
                columns.append(column)
                plain = plain and column_plain
            # The csv module writes what Go's writer writes, unless a field starts with
            # a space, holds a CR or is \\.: then each line is written here, as Go does.
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(zip(*columns, strict=True))
            text = out.getvalue()
            if not plain and (
                "\r" in text or _GO_QUOTES_MORE.search(text) or _GO_QUOTES_FIRST.match(text)
            ):
                lines = [
                    [cell if type(cell) is str else _cell(cell) for cell in line]
                    for line in zip(*columns, strict=True)
                ]
                text = "\n".join([_line(header), *map(_line, lines), ""])
            return text.encode()
        except (ValueError, TypeError) as exc:  # a surrogate, an int too long for text
            typed.encode_error(value, one_line(exc))

    def _check_unions(self, value: object, rows: list[dict[str, Any]]) -> None:
        """Refuse a value of a union of leaves whose text would read back as another."""
        for wire, union in self._unions:
            for index, row in enumerate(rows):
                cell = row.get(wire)
                if cell is not None:
                    reason = union.check(cell, cell if type(cell) is str else _cell(cell))
                    if reason is not None:
                        self._typed.encode_error(value, f"{index}.{wire}: {reason}")

    def decode(self, data: bytes, /) -> list[T]:
        """Parse CSV ``data`` (header first) and validate each row as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not UTF-8, badly quoted, has a row
                of the wrong length, or a row is not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        _allow_fields_of(len(text))
        reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True)
        rows: list[dict[str, Any]] = []
        try:
            header: list[str] | None = None
            for header in reader:
                if header:
                    break  # empty lines are skipped, as Go's reader skips them
            if not header:
                return []
            columns = [self._by_wire.get(name) for name in header]
            width = len(header)
            # enum and Literal columns: the text back to the value (1, not "1")
            texts = [
                (field.key, field.shape.texts)
                for field in columns
                if field is not None and field.shape.texts is not None
            ]
            for line in reader:
                if len(line) != width:
                    if not line:
                        continue
                    typed.decode_error(
                        size,
                        f"line {reader.line_num} has {len(line)} fields, the header {width}",
                    )
                row = {
                    field.key: None if cell == "" and field.nullable else cell
                    for field, cell in zip(columns, line, strict=True)
                    if field is not None
                }
                for key, choices in texts:
                    cell = row.get(key)
                    if cell is not None:
                        row[key] = choices.get(cell, cell)
                rows.append(row)
        except csv.Error as exc:
            typed.decode_error(size, f"not CSV: line {reader.line_num}: {one_line(exc)}")
        result: list[T] = typed.from_python(rows, size)
        return result
