"""XML, as Go's ``encoding/xml`` writes a struct: an element per field."""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET  # writing only: parsing goes through defusedxml
from collections.abc import Callable
from datetime import date, datetime, time
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from typing_extensions import TypeForm

from goflux._extras import require
from goflux.codecs._shape import Shape, shape_of
from goflux.codecs._typed import Typed, as_bytes, go_float, one_line

__all__ = ("XmlCodec",)

T = TypeVar("T")

# An XML 1.0 name without a colon (a namespace prefix is not a field name).
_NAME = re.compile(r"[A-Za-z_\u00C0-\uFFFF][\w.\-\u00B7\u00C0-\uFFFF]*")
# Characters XML 1.0 cannot carry at all, escaped or not.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_ITEM = "item"  # the element of each value of a list that is not a field


def _bool(value: bool) -> str:
    return "true" if value else "false"


# Text of the leaves pydantic dumps most, by exact type (a dict lookup, not a chain).
_TEXT: dict[type, Callable[[Any], str]] = {
    str: str,
    int: int.__repr__,
    float: go_float,
    bool: _bool,
    datetime: datetime.isoformat,
    date: date.isoformat,
    time: time.isoformat,
}


def _text(value: object) -> str:
    """A leaf as Go's encoding/xml writes it."""
    text = _TEXT.get(type(value))
    if text is not None:
        return text(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()  # as Go writes a []byte: the text it holds
    if isinstance(value, Enum):
        return _text(value.value)
    for base in (bool, str, int, float, datetime, date, time):  # subclasses of these
        if isinstance(value, base):
            return _TEXT[base](value)
    return _text(pydantic_core.to_jsonable_python(value))


class XmlCodec(Generic[T]):
    """XML codec for any type pydantic can validate (``goflux[xml]``).

    ``XmlCodec(Order)`` is typed ``XmlCodec[Order]``, a ``Codec[Order]``. It writes
    what Go's ``encoding/xml`` writes for a struct: a root element named after the
    type (or ``root=``, Go's ``XMLName``), then an element per field named by field
    name or alias, in declaration order; a nested model is an element of elements; a
    list is the field's element repeated once per value (an empty list writes
    nothing); a ``None`` field is left out, as Go leaves out a nil pointer. A list
    that is not a field (the payload itself, or a list in a list) holds one
    ``<item>`` per value, a ``dict`` one element per key. Leaves are text: ``true``
    / ``false``, integers, floats as Go's ``strconv`` writes them (``NaN``, ``+Inf``,
    ``1e+06``), RFC 3339 datetimes, ``bytes`` as the UTF-8 text they hold (as Go
    writes a ``[]byte``). No XML declaration, no indentation. Attributes are not
    written; on input they are ignored, as are namespaces and unknown elements (as Go
    does for fields it does not know).

    Decoding parses with ``defusedxml`` (entity declarations, the "billion laughs",
    and external entities are refused), rebuilds lists and nested models from the
    type, and validates the text with pydantic's lax mode (``"12"`` into an ``int``
    field). A missing element takes the field's default; a list field without one
    is an empty list, as Go's nil slice.

    Raises:
        TypeError: pydantic cannot build a schema for the type, or the root element
            name is not an XML name (pass ``root=``).
        MissingDependency: ``defusedxml`` is not installed.
    """

    __slots__ = ("_fromstring", "_parse_errors", "_root", "_shape", "_typed")

    content_type: ClassVar[str] = "application/xml"
    """The MIME type of what it writes (RFC 7303)."""

    def __init__(self, type_: TypeForm[T], /, *, root: str | None = None) -> None:
        require("defusedxml", "xml", "XmlCodec")
        from defusedxml import DefusedXmlException  # noqa: PLC0415
        from defusedxml.ElementTree import fromstring  # noqa: PLC0415

        self._typed = Typed(type_, "XmlCodec")
        name = root if root is not None else self._typed.name
        if not _NAME.fullmatch(name):
            raise TypeError(f"XmlCodec: {name!r} is not an XML element name: pass root='name'")
        self._root = name
        self._shape = shape_of(dict(self._typed.adapter.core_schema))
        self._fromstring = fromstring
        self._parse_errors = (ET.ParseError, DefusedXmlException, ValueError)

    @property
    def type(self) -> TypeForm[T]:
        """The payload type this codec was built for."""
        return self._typed.type  # type: ignore[return-value]

    @property
    def root(self) -> str:
        """The name of the root element it writes."""
        return self._root

    def __repr__(self) -> str:
        if self._root == self._typed.name:
            return f"XmlCodec({self._typed.name})"
        return f"XmlCodec({self._typed.name}, root={self._root!r})"

    def __reduce__(self) -> tuple[Any, tuple[object]]:
        """Pickle as its arguments: defusedxml's parser is looked up again."""
        return (functools.partial(XmlCodec, root=self._root), (self._typed.type,))

    def encode(self, value: T, /) -> bytes:
        """Return the XML element of ``value``, UTF-8, without a declaration.

        Raises:
            EncodeError: ``value`` is not a valid ``T``, has a key that is no XML
                name, or text XML cannot carry (control characters).
        """
        typed = self._typed
        obj = typed.to_python(value)
        root = ET.Element(self._root)
        try:
            if isinstance(obj, dict):
                _children(root, obj)
            elif isinstance(obj, list | tuple | set | frozenset):
                _items(root, obj)
            elif obj is not None:
                root.text = _text(obj)
            out = ET.tostring(root, encoding="unicode", short_empty_elements=False)
            _check(out)  # one search of the whole text: names are checked already
            if "\r" in out:  # a parser reads a bare CR as a line break: write it as Go does
                out = out.replace("\r", "&#xD;")
        except (ValueError, TypeError) as exc:
            typed.encode_error(value, one_line(exc))
        return out.encode()

    def decode(self, data: bytes, /) -> T:
        """Parse ``data`` as an XML element and validate it as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not well-formed XML, declares
                entities, or is not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            root = self._fromstring(data, forbid_dtd=False)
        except self._parse_errors as exc:
            typed.decode_error(size, f"not XML: {one_line(exc)}")
        value: T = typed.from_python(_read(root, self._shape), size)
        return value


def _check(text: str) -> None:
    found = _NOT_XML.search(text)
    if found is not None:
        raise ValueError(f"XML cannot carry the character {found.group()!r}")


_NAMES: set[str] = set()  # names found valid (field names, mostly): no regex for them
_NAMES_KEPT = 10_000


def _name(key: object) -> str:
    if key in _NAMES:
        return key
    if not isinstance(key, str) or not _NAME.fullmatch(key):
        raise ValueError(f"{key!r} is not an XML element name")
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES.add(key)
    return key


def _children(parent: ET.Element, fields: dict[Any, Any]) -> None:
    for key, value in fields.items():
        _add(parent, _name(key), value)


def _items(parent: ET.Element, values: Any) -> None:
    for value in values:
        _add(parent, _ITEM, value)


def _add(parent: ET.Element, name: str, value: object) -> None:
    if type(value) is str:
        ET.SubElement(parent, name).text = value
        return
    if value is None:
        return  # as Go leaves out a nil pointer
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:  # a field's list: the field's element, repeated
            if isinstance(item, list | tuple | set | frozenset):
                _items(ET.SubElement(parent, name), item)
            else:
                _add(parent, name, item)
        return
    element = ET.SubElement(parent, name)
    if isinstance(value, dict):
        _children(element, value)
    else:
        element.text = _text(value)


def _local(tag: str) -> str:
    return tag if tag[0] != "{" else tag.rpartition("}")[2]  # no namespace: most tags


def _read(element: ET.Element, shape: Shape) -> Any:
    """Rebuild the Python structure pydantic validates from an element and its shape."""
    kind = shape.kind
    if kind == "leaf":
        return element.text or "" if len(element) == 0 else _generic(element)
    if kind == "list":
        item = shape.item or Shape()
        return [_read(child, item) for child in element]
    if kind == "map":
        item = shape.item or Shape()
        return _grouped(element, lambda child: _read(child, item))
    if kind == "fields":
        return _read_fields(element, shape)
    return _generic(element)


def _read_fields(element: ET.Element, shape: Shape) -> dict[str, Any]:
    """A model's elements: a list field's element repeats, the others appear once."""
    plan = shape.plan or shape.reading_plan()
    out: dict[str, Any] = {}
    for child in element:
        tag = child.tag
        found = plan.get(tag if tag[0] != "{" else tag.rpartition("}")[2])
        if found is None:
            continue  # an element the type does not know: Go ignores it too
        key, sub_kind, sub = found
        if sub_kind == "leaf" and not len(child):
            out[key] = child.text or ""
        elif sub_kind == "list":
            # the field's element repeated; in a list of lists, each holds <item>s
            if key in out:
                out[key].append(_read(child, sub))
            else:
                out[key] = [_read(child, sub)]
        else:
            out[key] = _read(child, sub)
    for key in shape.required_lists:
        if key not in out:
            out[key] = []  # an empty list writes nothing
    return out


def _generic(element: ET.Element) -> Any:
    """Without a shape: text, or a mapping of children (repeated names as lists)."""
    if len(element) == 0:
        return element.text or ""
    return _grouped(element, _generic)


def _grouped(element: ET.Element, read: Callable[[ET.Element], Any]) -> dict[str, Any]:
    """The children by name, a name that repeats giving a list."""
    out: dict[str, Any] = {}
    for child in element:
        name = _local(child.tag)
        value = read(child)
        if name in out:
            existing = out[name]
            if isinstance(existing, list):
                existing.append(value)
            else:
                out[name] = [existing, value]
        else:
            out[name] = value
    return out
