"""XML, as Go's ``encoding/xml`` writes a struct: an element per field."""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET  # parse errors only: parsing goes through defusedxml
from collections.abc import Callable
from datetime import date, datetime, time
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from typing_extensions import TypeForm

from goflux._extras import require
from goflux.codecs._shape import Field, Shape, Union, shape_of
from goflux.codecs._typed import Typed, as_bytes, go_float, one_line

__all__ = ("XmlCodec",)

T = TypeVar("T")

# The names Go's encoding/xml reads (its tables "first" and "second", from Appendix B
# of XML 1.0; expat, the parser here, accepts exactly the same), without the colon: a
# namespace prefix is not a field name.
_NAME_START = (
    "A-Z_a-z\xc0-\xd6\xd8-\xf6\xf8-\u0131\u0134-\u013e\u0141-\u0148\u014a-\u017e"
    "\u0180-\u01c3\u01cd-\u01f0\u01f4\u01f5\u01fa-\u0217\u0250-\u02a8\u02bb-\u02c1"
    "\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03ce\u03d0-\u03d6\u03da\u03dc"
    "\u03de\u03e0\u03e2-\u03f3\u0401-\u040c\u040e-\u044f\u0451-\u045c\u045e-\u0481"
    "\u0490-\u04c4\u04c7\u04c8\u04cb\u04cc\u04d0-\u04eb\u04ee-\u04f5\u04f8\u04f9"
    "\u0531-\u0556\u0559\u0561-\u0586\u05d0-\u05ea\u05f0-\u05f2\u0621-\u063a"
    "\u0641-\u064a\u0671-\u06b7\u06ba-\u06be\u06c0-\u06ce\u06d0-\u06d3\u06d5"
    "\u06e5\u06e6\u0905-\u0939\u093d\u0958-\u0961\u0985-\u098c\u098f\u0990\u0993-\u09a8"
    "\u09aa-\u09b0\u09b2\u09b6-\u09b9\u09dc\u09dd\u09df-\u09e1\u09f0\u09f1\u0a05-\u0a0a"
    "\u0a0f\u0a10\u0a13-\u0a28\u0a2a-\u0a30\u0a32\u0a33\u0a35\u0a36\u0a38\u0a39"
    "\u0a59-\u0a5c\u0a5e\u0a72-\u0a74\u0a85-\u0a8b\u0a8d\u0a8f-\u0a91\u0a93-\u0aa8"
    "\u0aaa-\u0ab0\u0ab2\u0ab3\u0ab5-\u0ab9\u0abd\u0ae0\u0b05-\u0b0c\u0b0f\u0b10"
    "\u0b13-\u0b28\u0b2a-\u0b30\u0b32\u0b33\u0b36-\u0b39\u0b3d\u0b5c\u0b5d\u0b5f-\u0b61"
    "\u0b85-\u0b8a\u0b8e-\u0b90\u0b92-\u0b95\u0b99\u0b9a\u0b9c\u0b9e\u0b9f\u0ba3"
    "\u0ba4\u0ba8-\u0baa\u0bae-\u0bb5\u0bb7-\u0bb9\u0c05-\u0c0c\u0c0e-\u0c10"
    "\u0c12-\u0c28\u0c2a-\u0c33\u0c35-\u0c39\u0c60\u0c61\u0c85-\u0c8c\u0c8e-\u0c90"
    "\u0c92-\u0ca8\u0caa-\u0cb3\u0cb5-\u0cb9\u0cde\u0ce0\u0ce1\u0d05-\u0d0c\u0d0e-\u0d10"
    "\u0d12-\u0d28\u0d2a-\u0d39\u0d60\u0d61\u0e01-\u0e2e\u0e30\u0e32\u0e33\u0e40-\u0e45"
    "\u0e81\u0e82\u0e84\u0e87\u0e88\u0e8a\u0e8d\u0e94-\u0e97\u0e99-\u0e9f\u0ea1-\u0ea3"
    "\u0ea5\u0ea7\u0eaa\u0eab\u0ead\u0eae\u0eb0\u0eb2\u0eb3\u0ebd\u0ec0-\u0ec4"
    "\u0f40-\u0f47\u0f49-\u0f69\u10a0-\u10c5\u10d0-\u10f6\u1100\u1102\u1103\u1105-\u1107"
    "\u1109\u110b\u110c\u110e-\u1112\u113c\u113e\u1140\u114c\u114e\u1150\u1154"
    "\u1155\u1159\u115f-\u1161\u1163\u1165\u1167\u1169\u116d\u116e\u1172\u1173"
    "\u1175\u119e\u11a8\u11ab\u11ae\u11af\u11b7\u11b8\u11ba\u11bc-\u11c2\u11eb"
    "\u11f0\u11f9\u1e00-\u1e9b\u1ea0-\u1ef9\u1f00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc"
    "\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec"
    "\u1ff2-\u1ff4\u1ff6-\u1ffc\u2126\u212a\u212b\u212e\u2180-\u2182\u3007\u3021-\u3029"
    "\u3041-\u3094\u30a1-\u30fa\u3105-\u312c\u4e00-\u9fa5\uac00-\ud7a3"
)
_NAME_REST = (
    "\\-.0-9\xb7\u02d0\u02d1\u0300-\u0345\u0360\u0361\u0387\u0483-\u0486"
    "\u0591-\u05a1\u05a3-\u05b9\u05bb-\u05bd\u05bf\u05c1\u05c2\u05c4\u0640\u064b-\u0652"
    "\u0660-\u0669\u0670\u06d6-\u06e4\u06e7\u06e8\u06ea-\u06ed\u06f0-\u06f9\u0901-\u0903"
    "\u093c\u093e-\u094d\u0951-\u0954\u0962\u0963\u0966-\u096f\u0981-\u0983\u09bc"
    "\u09be-\u09c4\u09c7\u09c8\u09cb-\u09cd\u09d7\u09e2\u09e3\u09e6-\u09ef\u0a02"
    "\u0a3c\u0a3e-\u0a42\u0a47\u0a48\u0a4b-\u0a4d\u0a66-\u0a71\u0a81-\u0a83\u0abc"
    "\u0abe-\u0ac5\u0ac7-\u0ac9\u0acb-\u0acd\u0ae6-\u0aef\u0b01-\u0b03\u0b3c"
    "\u0b3e-\u0b43\u0b47\u0b48\u0b4b-\u0b4d\u0b56\u0b57\u0b66-\u0b6f\u0b82\u0b83"
    "\u0bbe-\u0bc2\u0bc6-\u0bc8\u0bca-\u0bcd\u0bd7\u0be7-\u0bef\u0c01-\u0c03"
    "\u0c3e-\u0c44\u0c46-\u0c48\u0c4a-\u0c4d\u0c55\u0c56\u0c66-\u0c6f\u0c82\u0c83"
    "\u0cbe-\u0cc4\u0cc6-\u0cc8\u0cca-\u0ccd\u0cd5\u0cd6\u0ce6-\u0cef\u0d02\u0d03"
    "\u0d3e-\u0d43\u0d46-\u0d48\u0d4a-\u0d4d\u0d57\u0d66-\u0d6f\u0e31\u0e34-\u0e3a"
    "\u0e46-\u0e4e\u0e50-\u0e59\u0eb1\u0eb4-\u0eb9\u0ebb\u0ebc\u0ec6\u0ec8-\u0ecd"
    "\u0ed0-\u0ed9\u0f18\u0f19\u0f20-\u0f29\u0f35\u0f37\u0f39\u0f3e\u0f3f\u0f71-\u0f84"
    "\u0f86-\u0f8b\u0f90-\u0f95\u0f97\u0f99-\u0fad\u0fb1-\u0fb7\u0fb9\u20d0-\u20dc"
    "\u20e1\u3005\u302a-\u302f\u3031-\u3035\u3099\u309a\u309d\u309e\u30fc-\u30fe"
)
_NAME = re.compile(f"[{_NAME_START}][{_NAME_START}{_NAME_REST}]*")
# Characters XML 1.0 cannot carry at all, escaped or not.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
# Text escaped as Go's EscapeString escapes it (a parser reads a bare CR, LF or tab in
# text as they are, but Go writes them as references, so do we).
_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        '"': "&#34;",
        "'": "&#39;",
        "\t": "&#x9;",
        "\n": "&#xA;",
        "\r": "&#xD;",
    }
)
_TO_ESCAPE = re.compile("[&<>\"'\t\n\r]")
# What Go's strings.TrimSpace removes (unicode.IsSpace) before it parses a bool or number.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_ITEM = "item"  # the element of each value of a list that is not a field
_LISTS = (list, tuple, set, frozenset)
_UNTYPED = Shape(untyped=True, nullable=True)


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


def _escape(text: str) -> str:
    return text.translate(_ESCAPES) if _TO_ESCAPE.search(text) else text


class _Refused(ValueError):
    """A value XML would not give back as it is: the path is added on the way out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def __str__(self) -> str:
        where = "".join(reversed(self.path)).removeprefix(".")
        return f"{where}: {self.reason}" if where else self.reason


class XmlCodec(Generic[T]):
    """XML codec for any type pydantic can validate (``goflux[xml]``).

    ``XmlCodec(Order)`` is typed ``XmlCodec[Order]``, a ``Codec[Order]``. It writes
    what Go's ``encoding/xml`` writes for a struct: a root element named after the
    type (or ``root=``, Go's ``XMLName``), then an element per field named by field
    name or alias, in declaration order; a nested model is an element of elements; a
    list is the field's element repeated once per value (an empty list writes
    nothing); a ``None`` field is left out, as Go leaves out a nil pointer. A list
    that is not a field (the payload itself, or a list in a list) holds one
    ``<item>`` per value, a ``dict`` one element per key (a list value repeats the
    key's element, as a list field does). Leaves are text, escaped as Go's
    ``EscapeString`` escapes it (``&#34;``, ``&#39;``, ``&#x9;``, ``&#xA;``,
    ``&#xD;``): ``true`` / ``false``, integers, floats as Go's ``strconv`` writes
    them (``NaN``, ``+Inf``, ``1e+06``), RFC 3339 datetimes, ``bytes`` as the UTF-8
    text they hold (as Go writes a ``[]byte``), an enum or ``Literal`` as its value.
    No XML declaration, no indentation. Attributes are not written; on input they
    are ignored, as are namespaces and unknown elements (as Go does for fields it
    does not know).

    XML has no types and no list markers, so what is written must read back as it
    was, or encoding refuses it (``EncodeError`` naming the field): a name that is
    not an XML name as Go's reader and expat accept it; ``None`` in a list or as a
    ``dict`` value, an empty list as a ``dict`` value, and ``[]`` in a field that
    also accepts ``None`` (each would be written as nothing); a list in a field typed
    as a union of lists and single values (a list of one reads back as the single
    value), or inside a model of a union of shapes (``Inner | int``) a list of one
    or of lists; a value of a union of single-value types whose text reads back as
    another member (``1`` in ``int | str`` reads back as ``"1"``, ``1`` in
    ``bool | int`` as ``True``); and in an ``Any`` field anything but text and
    non-empty mappings of text (``1`` would read back as ``"1"``, a list of one as
    its value). Values nested deeper than Python can recurse are refused too. A
    tuple's items are read back each by its own type.

    Decoding parses with ``defusedxml`` (entity declarations, the "billion laughs",
    and external entities are refused), rebuilds lists and nested models from the
    type, and validates the text with pydantic's lax mode (``"12"`` into an ``int``
    field, ``"2"`` into an enum or ``Literal`` whose value is ``2``); booleans and
    numbers may have space around them, which Go trims too. A missing element
    reads as Go's zero value where there is one: ``None`` for a field that accepts
    ``None`` (Go's nil pointer, whatever the field's default), ``[]`` for any other
    list field (Go's nil slice); other fields take their default.

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
                name, text XML cannot carry (control characters), or a value XML
                would not read back as it is (see the class).
        """
        typed = self._typed
        obj = typed.to_python(value)
        try:
            out: list[str] = []
            _root(out, self._root, obj, self._shape)
            text = "".join(out)
            _check(text)  # one search of the whole text: names are checked already
        except RecursionError:
            typed.encode_error(value, "nested too deeply")
        except (ValueError, TypeError) as exc:
            typed.encode_error(value, one_line(exc))
        return text.encode()

    def decode(self, data: bytes, /) -> T:
        """Parse ``data`` as an XML element and validate it as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not well-formed XML, declares
                entities, is nested too deeply, or is not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            root = self._fromstring(data, forbid_dtd=False)
        except self._parse_errors as exc:
            typed.decode_error(size, f"not XML: {one_line(exc)}")
        try:
            value: T = typed.from_python(_read(root, self._shape), size)
        except RecursionError:
            typed.decode_error(size, "nested too deeply")
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


# Writing. Each function appends the text of elements to ``out``; a value XML would
# not give back as it is raises _Refused, which collects the path on its way out.


def _root(out: list[str], name: str, obj: object, shape: Shape) -> None:
    if obj is None:
        raise _Refused("XML writes None as nothing: a payload cannot be None")
    if shape.kind == "list" and isinstance(obj, _LISTS):
        out.append(f"<{name}>")
        _items(out, obj, shape)
        out.append(f"</{name}>")
    elif shape.kind == "any":
        _loose(out, name, obj, shape)
    else:
        _element(out, name, obj, shape)


def _element(out: list[str], name: str, value: object, shape: Shape) -> None:
    """One element holding ``value`` (which is not None)."""
    if type(value) is str:
        if shape.union is not None:
            _reread(value, value, shape.union)
        out.append(f"<{name}>{_escape(value)}</{name}>")
    elif isinstance(value, dict):
        out.append(f"<{name}>")
        _children(out, value, shape)
        out.append(f"</{name}>")
    elif isinstance(value, _LISTS):
        out.append(f"<{name}>")
        _items(out, value, shape if shape.kind == "list" else _UNTYPED)
        out.append(f"</{name}>")
    elif value is None:
        raise _Refused("XML writes None as nothing: it cannot stand in a list or for a key")
    else:
        text = _text(value)
        if shape.union is not None:
            _reread(value, text, shape.union)
        out.append(f"<{name}>{_escape(text)}</{name}>")


def _reread(value: object, text: str, union: Union) -> None:
    """Refuse ``value`` if its text would read back as another value of the union."""
    reason = union.check(value, text)
    if reason is not None:
        raise _Refused(reason)


def _children(out: list[str], fields: dict[Any, Any], shape: Shape) -> None:
    """The elements of a model's fields or of a mapping's keys."""
    kind = shape.kind
    known = shape.fields if kind == "fields" else None
    item = shape.item or _UNTYPED
    for key, value in fields.items():
        name = _name(key)
        try:
            if known is not None:
                field = known.get(key)
                if field is None:
                    _free(out, name, value)  # not a declared field: as it comes
                else:
                    _field(out, name, value, field)
            elif kind == "map":
                _entry(out, name, value, item)
            elif shape.untyped:
                _loose(out, name, value, shape)
            else:
                _free(out, name, value)
        except _Refused as exc:
            exc.path.append("." + name)
            raise


def _field(out: list[str], name: str, value: object, field: Field) -> None:
    shape = field.shape
    if type(value) is str and shape.union is None:
        out.append(f"<{name}>{_escape(value)}</{name}>")
        return
    if value is None:
        if field.droppable:
            raise _Refused("XML writes None as nothing, which reads back as a missing key")
        return  # as Go leaves out a nil pointer; read back as None
    kind = shape.kind
    if kind == "list" and isinstance(value, _LISTS):
        if not value:
            if field.nullable or field.droppable:
                raise _Refused(
                    "XML writes an empty list as nothing, as it writes None: "
                    "a field that may be None or missing cannot hold []"
                )
            return  # read back as [], as Go reads a nil slice
        _repeated(out, name, value, shape)
    elif kind == "any":
        _loose(out, name, value, shape)
    else:
        _element(out, name, value, shape)


def _repeated(out: list[str], name: str, values: Any, shape: Shape) -> None:
    """A list (of ``shape``) as the field's (or key's) element, once per value."""
    items = shape.items
    item = shape.item or _UNTYPED
    for index, value in enumerate(values):
        try:
            _item(out, name, value, item if items is None else shape.item_at(index))
        except _Refused as exc:
            exc.path.append(f"[{index}]")
            raise


def _items(out: list[str], values: Any, shape: Shape) -> None:
    """A list (of ``shape``) that is not a field: an <item> per value."""
    items = shape.items
    item = shape.item or _UNTYPED
    for index, value in enumerate(values):
        try:
            _item(out, _ITEM, value, item if items is None else shape.item_at(index))
        except _Refused as exc:
            exc.path.append(f"[{index}]")
            raise


def _item(out: list[str], name: str, value: object, shape: Shape) -> None:
    if value is None:
        raise _Refused("XML has no None in a list: it would be left out")
    if shape.kind == "any":
        _loose(out, name, value, shape)
    else:
        _element(out, name, value, shape)


def _entry(out: list[str], name: str, value: object, shape: Shape) -> None:
    """The value of a mapping's key."""
    if value is None:
        raise _Refused("XML writes None as nothing: the key would be lost")
    if shape.kind == "list" and isinstance(value, _LISTS):
        if not value:
            raise _Refused("XML writes an empty list as nothing: the key would be lost")
        _repeated(out, name, value, shape)
    elif shape.kind == "any":
        _loose(out, name, value, shape)
    else:
        _element(out, name, value, shape)


def _loose(out: list[str], name: str, value: object, shape: Shape) -> None:
    """A value of Any, or of a union of shapes XML cannot tell apart."""
    if shape.untyped:
        if type(value) is str:
            out.append(f"<{name}>{_escape(value)}</{name}>")
            return
        if isinstance(value, dict) and value:
            out.append(f"<{name}>")
            _children(out, value, shape)
            out.append(f"</{name}>")
            return
        what = (
            "None"
            if value is None
            else "an empty mapping"
            if isinstance(value, dict)
            else f"a value of type {type(value).__name__}"
        )
        raise _Refused(
            f"an Any field reads back as text or a mapping of texts, not as {what}: "
            "give the field a type"
        )
    if isinstance(value, _LISTS):
        raise _Refused(
            "a union of lists and single values cannot hold a list: XML reads a list "
            "of one back as the value alone"
        )
    if isinstance(value, dict):
        out.append(f"<{name}>")
        _union_children(out, value)
        out.append(f"</{name}>")
    else:
        _element(out, name, value, shape)


def _union_children(out: list[str], value: dict[Any, Any]) -> None:
    """A mapping in a union of shapes: it is read back without a shape.

    So a list of one item (read back as the item) or of lists is refused.
    """
    for key, item in value.items():
        name = _name(key)
        try:
            if isinstance(item, _LISTS):
                if len(item) == 1:
                    raise _Refused(
                        "in a union of shapes XML reads a list of 1 back as its value: "
                        "give the field one type"
                    )
                if any(isinstance(inner, _LISTS) for inner in item):
                    raise _Refused("in a union of shapes XML cannot read back a list of lists")
            for one in item if isinstance(item, _LISTS) else (item,):
                if isinstance(one, dict):
                    out.append(f"<{name}>")
                    _union_children(out, one)
                    out.append(f"</{name}>")
                else:
                    _free(out, name, one)
        except _Refused as exc:
            exc.path.append("." + name)
            raise


def _free(out: list[str], name: str, value: object) -> None:
    """A value without a shape (inside a union): a list repeats, None is left out."""
    if type(value) is str:
        out.append(f"<{name}>{_escape(value)}</{name}>")
    elif value is None:
        return
    elif isinstance(value, _LISTS):
        for item in value:
            if isinstance(item, _LISTS):
                out.append(f"<{name}>")
                for inner in item:
                    _free(out, _ITEM, inner)
                out.append(f"</{name}>")
            else:
                _free(out, name, item)
    elif isinstance(value, dict):
        out.append(f"<{name}>")
        for key, item in value.items():
            _free(out, _name(key), item)
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_escape(_text(value))}</{name}>")


# Reading: the Python structure pydantic validates, from an element and its shape.


def _local(tag: str) -> str:
    return tag if tag[0] != "{" else tag.rpartition("}")[2]  # no namespace: most tags


def _leaf(text: str, shape: Shape) -> Any:
    if shape.trim:
        text = text.strip(_GO_SPACE)  # as Go's strings.TrimSpace before ParseBool/ParseInt
    texts = shape.texts
    return text if texts is None else texts.get(text, text)


def _read(element: ET.Element, shape: Shape) -> Any:
    kind = shape.kind
    if kind == "leaf":
        if len(element):
            return _generic(element)
        text = element.text or ""
        return _leaf(text, shape) if shape.trim or shape.texts is not None else text
    if kind == "list":
        return _read_list(element, shape)
    if kind == "map":
        return _read_map(element, shape.item or _UNTYPED)
    if kind == "fields":
        return _read_fields(element, shape)
    return _generic(element)


def _read_list(element: ET.Element, shape: Shape) -> list[Any]:
    """A list that is not a field: its <item>s (a tuple's, each by its position)."""
    if shape.items is not None:
        return [_read(child, shape.item_at(index)) for index, child in enumerate(element)]
    item = shape.item or _UNTYPED
    return [_read(child, item) for child in element]


def _read_fields(element: ET.Element, shape: Shape) -> dict[str, Any]:  # noqa: PLR0912
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
            text = child.text or ""
            out[key] = _leaf(text, sub) if sub.trim or sub.texts is not None else text
        elif sub_kind == "list":
            # the field's element repeated; in a list of lists, each holds <item>s
            if key in out:
                out[key].append(_read(child, sub))
            else:
                out[key] = [_read(child, sub)]
        elif sub_kind == "tuple":  # each item by its position
            items = out.get(key)
            if items is None:
                items = out[key] = []
            items.append(_read(child, sub.item_at(len(items))))
        elif sub_kind == "any" and key in out:
            # repeated where the type does not say list: keep them all (validation
            # decides), never only the last
            value = _read(child, sub)
            existing = out[key]
            if isinstance(existing, list):
                existing.append(value)
            else:
                out[key] = [existing, value]
        else:
            out[key] = _read(child, sub)
    for key, is_list in shape.absent:
        if key not in out:
            out[key] = [] if is_list else None  # Go's nil slice, nil pointer
    return out


def _read_map(element: ET.Element, item: Shape) -> dict[str, Any]:
    if item.kind != "list":
        return _grouped(element, lambda child: _read(child, item))
    out: dict[str, list[Any]] = {}
    for child in element:  # a key's list: its element repeated, as a list field's
        name = _local(child.tag)
        values = out.get(name)
        if values is None:
            values = out[name] = []
        values.append(_read(child, item.item_at(len(values))))
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
