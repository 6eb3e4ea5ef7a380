"""CSV: a list of rows of one flat type, a header row naming the fields (stdlib csv)."""

from __future__ import annotations

import csv
import io
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
    declaration order, then a line per row; lines end in ``\\n`` and fields are
    quoted only where needed: what Go's ``encoding/csv`` writer writes and goencode's
    ``csv`` codec passes through as ``[][]string``. Values are written as Go's
    ``strconv`` writes them (``true``, ``1e+06``, ``NaN``), datetimes as RFC 3339,
    ``None`` as an empty field. An empty list is the header alone.

    Decoding reads the header and maps columns by name (any order; unknown columns
    are ignored, a missing one takes the field's default), refuses rows whose
    field count differs from the header's and bad quoting, reads an empty field as
    ``None`` where the field accepts ``None``, and validates every row with
    pydantic's lax mode (``"12"`` into an ``int`` field); an error names the row
    (``3.qty``, counting rows from 0 after the header). A UTF-8 byte order mark is
    skipped. Empty input is an empty list.

    Raises:
        TypeError: pydantic cannot build a schema for the type, or it is not a flat
            row type.
    """

    __slots__ = ("_by_wire", "_header", "_row_check", "_row_name", "_typed")

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
        self._by_wire: dict[str, Field] = dict(shape.fields)

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
            EncodeError: ``value`` is not a list of valid rows.
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
        try:
            # str and int cells go to the writer as they are: its text of them is Go's.
            lines = [
                [
                    cell if type(cell) is str or type(cell) is int else _cell(cell)
                    for cell in map(row.get, header)
                ]
                for row in rows
            ]
        except (ValueError, TypeError) as exc:
            typed.encode_error(value, one_line(exc))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(lines)
        text = out.getvalue()
        if "\r" in text:
            # The writer quotes only for its own line ending (\n): a field holding a
            # bare \r is quoted here, as Go's writer does.
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
            writer.writerow(header)
            for line in lines:
                needs_quotes = any(isinstance(cell, str) and "\r" in cell for cell in line)
                (quoted if needs_quotes else writer).writerow(line)
            text = out.getvalue()
        return text.encode()

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
        reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""), strict=True)
        rows: list[dict[str, Any]] = []
        try:
            header = next(reader, None)
            if header is None:
                return []
            columns = [self._by_wire.get(name) for name in header]
            width = len(header)
            for line in reader:
                if len(line) != width:
                    typed.decode_error(
                        size,
                        f"line {reader.line_num} has {len(line)} fields, the header {width}",
                    )
                rows.append(
                    {
                        field.key: None if cell == "" and field.nullable else cell
                        for field, cell in zip(columns, line, strict=True)
                        if field is not None
                    }
                )
        except csv.Error as exc:
            typed.decode_error(size, f"not CSV: line {reader.line_num}: {one_line(exc)}")
        result: list[T] = typed.from_python(rows, size)
        return result
