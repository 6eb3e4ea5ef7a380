"""YAML 1.2, as Go's ``yaml.v3`` reads and writes it (ruamel.yaml)."""

from __future__ import annotations

import functools
import io
import re
import threading
from datetime import date, datetime
from typing import Any, ClassVar, Generic, TypeVar

import pydantic_core
from typing_extensions import TypeForm

from goflux._extras import require
from goflux.codecs._typed import Typed, as_bytes, one_line

__all__ = ("YamlCodec",)

T = TypeVar("T")

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
# YAML 1.1's booleans and base-60 numbers: strings in YAML 1.2, but yaml.v2, PyYAML and
# other 1.1 readers take them for booleans and numbers, so they are written quoted (as
# yaml.v3 and js-yaml quote the booleans).
_YAML_1_1_ONLY = re.compile(
    r"y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"
)
# A document whose aliases expand to more nodes than this many times its own size
# (plus a floor) is refused before it is built: a "billion laughs" of anchors.
_ALIAS_RATIO = 10
_ALIAS_FLOOR = 100_000


@functools.cache
def _classes() -> tuple[type, type, type]:
    """Build the ruamel.yaml classes on first use (the dependency is optional)."""
    from ruamel.yaml.constructor import SafeConstructor  # noqa: PLC0415
    from ruamel.yaml.nodes import ScalarNode  # noqa: PLC0415
    from ruamel.yaml.representer import SafeRepresenter  # noqa: PLC0415
    from ruamel.yaml.resolver import VersionedResolver  # noqa: PLC0415
    from ruamel.yaml.tag import Tag  # noqa: PLC0415

    class Constructor(SafeConstructor):
        """YAML 1.2 core: a plain ``2001-12-14`` is text (pydantic reads a date from it)."""

        def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
            return self.construct_scalar(node)

    Constructor.add_constructor(_TIMESTAMP, Constructor.construct_yaml_timestamp)

    bool_tag = Tag(suffix=_BOOL)

    class QuoteOldBooleans:
        """For writing: quote what a YAML 1.1 reader would take for a boolean or number."""

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is ScalarNode and implicit[0] and _YAML_1_1_ONLY.fullmatch(value):
                return bool_tag
            return super().resolve(kind, value, implicit)  # type: ignore[misc]

    class Resolver(QuoteOldBooleans, VersionedResolver):
        """The resolver of the pure-Python emitter (without ruamel.yaml.clib)."""

    class Representer(QuoteOldBooleans, SafeRepresenter):
        """Plain RFC 3339 timestamps (as Go writes time.Time), null as ``null``, no anchors.

        With ruamel.yaml.clib the C emitter mixes the representer and a resolver into
        one object, so the quoting rule rides on the representer too.
        """

        def ignore_aliases(self, data: Any) -> bool:
            return True

        def represent_none(self, data: Any) -> Any:
            return self.represent_scalar(_NULL, "null")

        def represent_datetime(self, data: Any) -> Any:
            text = data.isoformat() if data.tzinfo is not None else data.isoformat(" ")
            return self.represent_scalar(_TIMESTAMP, text)

        def represent_date(self, data: Any) -> Any:
            return self.represent_scalar(_TIMESTAMP, data.isoformat())

        def represent_text(self, data: Any) -> Any:
            # Several lines as a literal block, as yaml.v3 writes them.
            return self.represent_scalar(_STR, data, style="|" if "\n" in data else None)

        def represent_sequence_of(self, data: Any) -> Any:
            return self.represent_list(list(data))

        def represent_other(self, data: Any) -> Any:
            return self.represent_data(pydantic_core.to_jsonable_python(data))

    Representer.add_representer(str, Representer.represent_text)
    Representer.add_representer(type(None), Representer.represent_none)
    Representer.add_representer(datetime, Representer.represent_datetime)
    Representer.add_representer(date, Representer.represent_date)
    for kind in (tuple, set, frozenset):
        Representer.add_representer(kind, Representer.represent_sequence_of)
    Representer.add_multi_representer(object, Representer.represent_other)
    return Constructor, Resolver, Representer


class YamlCodec(Generic[T]):
    """YAML 1.2 codec for any type pydantic can validate (``goflux[yaml]``).

    ``YamlCodec(Order)`` is typed ``YamlCodec[Order]``, a ``Codec[Order]``. A model
    is a mapping keyed by field name (alias where it has one), in declaration order,
    block style, one document: what Go's ``yaml.v3`` writes and reads.

    It reads YAML 1.2 (the core schema), as ``yaml.v3`` and js-yaml do and unlike
    YAML 1.1 readers such as PyYAML: a plain ``no``, ``on`` or ``y`` is text, not a
    boolean; ``08001`` is the integer 8001; a plain ``2001-12-14`` is text, which
    pydantic reads into a ``date`` or ``datetime`` field. It writes so that YAML 1.1
    and 1.2 readers agree: strings that either would take for something else
    (``"no"``, ``"on"``, ``"08001"``, ``"2001-12-14"``, ``"null"``) are quoted;
    ``datetime`` and ``date`` are plain RFC 3339 timestamps, which ``yaml.v3`` reads
    into ``time.Time``; ``bytes`` are ``!!binary`` (base64); NaN and Infinity are
    ``.nan`` and ``.inf``; ``None`` is ``null``. Anchors are never written; a
    document whose aliases would expand past ten times its size is refused (a
    "billion laughs"), as is a mapping with a duplicate key.

    Decoding validates with pydantic's lax mode (YAML text carries dates as text).

    Raises:
        TypeError: pydantic cannot build a schema for the given type.
        MissingDependency: ``ruamel.yaml`` is not installed.
    """

    __slots__ = ("_error", "_local", "_typed", "_yaml")

    content_type: ClassVar[str] = "application/yaml"
    """The MIME type of what it writes (RFC 9512)."""

    def __init__(self, type_: TypeForm[T], /) -> None:
        require("ruamel.yaml", "yaml", "YamlCodec")
        from ruamel.yaml import YAML  # noqa: PLC0415
        from ruamel.yaml.error import YAMLError  # noqa: PLC0415

        self._typed = Typed(type_, "YamlCodec")
        self._yaml = YAML
        self._error = YAMLError
        # ruamel.yaml's YAML objects keep state while they work: one pair per thread.
        self._local = threading.local()

    @property
    def _loader(self) -> Any:
        try:
            return self._local.loader
        except AttributeError:
            self._make()
            return self._local.loader

    @property
    def _dumper(self) -> Any:
        try:
            return self._local.dumper
        except AttributeError:
            self._make()
            return self._local.dumper

    def _make(self) -> None:
        constructor, resolver, representer = _classes()
        loader = self._yaml(typ="safe")
        loader.Constructor = constructor
        dumper = self._yaml(typ="safe")
        dumper.Resolver = resolver
        dumper.Representer = representer
        dumper.default_flow_style = False
        # Fields in declaration order (ruamel.yaml sorts keys unless told; it types the
        # setting as None, its "default", though it takes a bool).
        dumper.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
        dumper.allow_unicode = True
        dumper.width = 1 << 30  # no folded lines: a long string stays on one line
        self._local.loader = loader
        self._local.dumper = dumper

    @property
    def type(self) -> TypeForm[T]:
        """The payload type this codec was built for."""
        return self._typed.type  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"YamlCodec({self._typed.name})"

    def __reduce__(self) -> tuple[Any, tuple[object]]:
        """Pickle as its payload type: the per-thread YAML objects are made again."""
        return (YamlCodec, (self._typed.type,))

    def encode(self, value: T, /) -> bytes:
        """Return the YAML document of ``value``, UTF-8.

        Raises:
            EncodeError: ``value`` is not a valid ``T``.
        """
        typed = self._typed
        obj = typed.to_python(value)
        out = io.BytesIO()
        try:
            self._dumper.dump(obj, out)
        except (self._error, ValueError, TypeError) as exc:
            typed.encode_error(value, one_line(exc))
        return out.getvalue()

    def decode(self, data: bytes, /) -> T:
        """Parse and validate the YAML document ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not UTF-8, not one YAML document,
                aliased past the limit, or not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            text = data.decode()
            limit = _ALIAS_FLOOR + _ALIAS_RATIO * len(text)
            bomb = "*" in text and self._expands_past(text, limit)
            obj = None if bomb else self._loader.load(text)
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        except (self._error, ValueError, TypeError, RecursionError) as exc:
            typed.decode_error(size, f"not YAML: {one_line(exc)}")
        if bomb:
            typed.decode_error(size, f"aliases expand past {limit} nodes (a billion laughs)")
        value: T = typed.from_python(obj, size)
        return value

    def _expands_past(self, text: str, limit: int) -> bool:
        """Whether the document's aliases expand it to more than ``limit`` nodes."""
        root = self._loader.compose(text)
        if root is None:
            return False
        expanded: dict[int, int] = {}

        def count(node: Any) -> int:
            key = id(node)
            if key in expanded:
                return expanded[key]
            expanded[key] = 1  # a recursive alias counts once
            total = 1
            value = node.value
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, tuple):  # a mapping's (key, value) pair
                        total += count(item[0]) + count(item[1])
                    else:
                        total += count(item)
                    if total > limit:
                        break
            expanded[key] = total
            return total

        return count(root) > limit
