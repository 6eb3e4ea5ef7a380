"""YAML 1.2, as Go's ``yaml.v3`` reads and writes it (ruamel.yaml)."""

from __future__ import annotations

import functools
import io
import re
import threading
from datetime import date, datetime, timedelta
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
MAX_DEPTH = 500
"""Collections nested deeper than this are refused when decoding.

ruamel.yaml.clib composes nodes by recursing on the C stack, unchecked: some 27000
levels overflow an 8 MiB stack and kill the process. goflux composes the C parser's
events itself, with this bound (yaml.v3 stops at 10000, pydantic's JSON at 200). Under
Python's default recursion limit :meth:`YamlCodec.encode` refuses some 300 levels.
"""
# Written as they are, YAML 1.1 emitters (libyaml, ruamel.yaml) fold NEL, LS and PS
# like line breaks: YAML 1.2 readers (yaml.v3, js-yaml) then read other text. A string
# holding one is written double-quoted, where they are escaped as \N, \L and \P.
_BREAKS = re.compile("[\x85\u2028\u2029]")
_MINUTE = timedelta(minutes=1)


class _OddOffset(Exception):
    """A datetime whose UTC offset is not whole minutes (RFC 3339 cannot write it)."""

    def __init__(self, at: datetime) -> None:
        super().__init__("UTC offsets must be whole minutes")
        self.at = at


def _path_to(obj: Any, target: object) -> str:
    """Where ``target`` (by identity) sits in the dumped ``obj``, as ``a.0.b``."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return ".".join(path) or "<root>"
        if isinstance(node, dict):
            stack.extend((value, (*path, str(key))) for key, value in node.items())
        elif isinstance(node, list | tuple | set | frozenset):
            stack.extend((value, (*path, str(index))) for index, value in enumerate(node))
    return "<unknown>"


@functools.cache
def _classes() -> tuple[type, type, type, type | None]:
    """Build the ruamel.yaml classes on first use (the dependency is optional).

    The fourth is the loader over ruamel.yaml.clib's parser, None without it.
    """
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
            offset = data.utcoffset()
            if offset is not None and offset % _MINUTE:
                raise _OddOffset(data)
            text = data.isoformat() if data.tzinfo is not None else data.isoformat(" ")
            return self.represent_scalar(_TIMESTAMP, text)

        def represent_date(self, data: Any) -> Any:
            return self.represent_scalar(_TIMESTAMP, data.isoformat())

        def represent_text(self, data: Any) -> Any:
            # Several lines as a literal block, as yaml.v3 writes them; NEL, LS and PS
            # escaped in double quotes.
            style = None
            if "\n" in data:
                style = "|"
            if _BREAKS.search(data) is not None:
                style = '"'
            return self.represent_scalar(_STR, data, style=style)

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
    return Constructor, Resolver, Representer, _c_loader(Constructor)


def _c_loader(constructor: Any) -> type | None:
    """The loader over ruamel.yaml.clib's parser, composing in Python, depth-bounded."""
    from ruamel.yaml import main  # noqa: PLC0415

    parser: Any = getattr(main, "CParser", None)
    if parser is None:  # PyPy, or no wheel: the pure-Python loader
        return None
    from ruamel.yaml.composer import ComposerError  # noqa: PLC0415
    from ruamel.yaml.events import (  # noqa: PLC0415
        AliasEvent,
        MappingEndEvent,
        ScalarEvent,
        SequenceEndEvent,
        SequenceStartEvent,
        StreamEndEvent,
    )
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode  # noqa: PLC0415
    from ruamel.yaml.resolver import VersionedResolver  # noqa: PLC0415

    leaves = (ScalarEvent, AliasEvent)

    class Loader(parser, constructor, VersionedResolver):  # type: ignore[misc]
        """libyaml parses (no recursion there); the nodes are composed here, bounded.

        ruamel.yaml.clib's own composer recurses on the C stack without a limit.
        """

        # YAML 1.2, as ruamel.yaml's C loader resolves (without a property that tries
        # three attributes this loader lacks, for every scalar).
        processing_version = (1, 2)

        def __init__(self, text: str) -> None:
            parser.__init__(self, text)
            self._parser = self._composer = self
            constructor.__init__(self, loader=self)
            VersionedResolver.__init__(self, loadumper=self)
            self.allow_duplicate_keys = False
            self.anchors: dict[Any, Any] = {}

        def get_single_node(self) -> Any:
            get = self.get_event
            get()  # stream start
            root: Any = None
            event = get()
            if not isinstance(event, StreamEndEvent):
                event = get()  # the document's start, then its node
                kind = type(event)
                leaf = kind is ScalarEvent or kind is AliasEvent
                root = self.leaf(event) if leaf else self.collection(event, 0)
                get()  # document end
                event = get()
            if not isinstance(event, StreamEndEvent):
                raise ComposerError(
                    "expected a single document in the stream",
                    root.start_mark,
                    "but found another document",
                    event.start_mark,
                )
            return root

        def leaf(self, event: Any) -> Any:
            """The node of a scalar or an alias event."""
            anchor = event.anchor
            if type(event) is AliasEvent:
                if anchor not in self.anchors:
                    raise ComposerError(
                        None, None, f"found undefined alias {anchor!r}", event.start_mark
                    )
                return self.anchors[anchor]
            tag = event.ctag
            if tag is None or str(tag) == "!":
                tag = self.resolve(ScalarNode, event.value, event.implicit)
            node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
            return node

        def collection(self, event: Any, depth: int) -> Any:
            """The node of a sequence or mapping: one frame a level, at most MAX_DEPTH."""
            if depth >= MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH}", event.start_mark)
            depth += 1
            sequence = type(event) is SequenceStartEvent
            kind = SequenceNode if sequence else MappingNode
            tag = event.ctag
            if tag is None or str(tag) == "!":
                tag = self.resolve(kind, None, event.implicit)
            node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
            if event.anchor is not None:
                self.anchors[event.anchor] = node
            get, leaf, collection, items = self.get_event, self.leaf, self.collection, node.value
            end = SequenceEndEvent if sequence else MappingEndEvent
            while type(child := get()) is not end:
                first = leaf(child) if type(child) in leaves else collection(child, depth)
                if sequence:
                    items.append(first)
                else:
                    child = get()
                    value = leaf(child) if type(child) in leaves else collection(child, depth)
                    items.append((first, value))
            node.end_mark = child.end_mark
            return node

    return Loader


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
    ``.nan`` and ``.inf``; ``None`` is ``null``; a string holding NEL, LS or PS
    (U+0085, U+2028, U+2029) is double-quoted, with them escaped (written raw, a YAML
    1.2 reader would read other text). Anchors are never written; a document whose
    aliases would expand past ten times its size is refused (a "billion laughs"), as
    is a mapping with a duplicate key or collections nested more than 500 deep (the
    process's C stack is never at stake); an anchor defined again names the later
    node, as in yaml.v3 and js-yaml. A ``datetime`` whose UTC offset is not whole
    minutes (zones before 1900 ran on local mean time: Amsterdam was +00:19:32) is an
    :class:`~goflux.EncodeError`: RFC 3339 cannot write it.

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
        """The pure-Python loader, used only without ruamel.yaml.clib."""
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
        constructor, resolver, representer, _ = _classes()
        loader = self._yaml(typ="safe", pure=True)
        loader.Constructor = constructor
        loader.max_depth = MAX_DEPTH + 1  # it counts the scalar at the bottom too
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
            EncodeError: ``value`` is not a valid ``T``, is nested too deep, or holds a
                ``datetime`` whose UTC offset is not whole minutes.
        """
        typed = self._typed
        obj = typed.to_python(value)
        out = io.BytesIO()
        try:
            self._dumper.dump(obj, out)
        except BaseException as exc:
            # The dumper's emitter is left mid-document: every later dump would write
            # nothing or fail. Make a new one for this thread.
            self._local.__dict__.pop("dumper", None)
            if isinstance(exc, RecursionError):
                typed.encode_error(value, "nested too deep")
            if isinstance(exc, _OddOffset):
                typed.encode_error(
                    value,
                    f"UTC offset {exc.at.utcoffset()} is not whole minutes, which RFC 3339"
                    f" requires (at {_path_to(obj, exc.at)})",
                )
            if isinstance(exc, self._error | ValueError | TypeError):
                typed.encode_error(value, one_line(exc))
            raise
        return out.getvalue()

    def decode(self, data: bytes, /) -> T:
        """Parse and validate the YAML document ``data`` as a ``T``.

        Raises:
            DecodeError: ``data`` is not bytes, not UTF-8, not one YAML document,
                aliased past the limit, nested too deep, or not a valid ``T``.
        """
        typed = self._typed
        data = as_bytes(data, typed.name)
        size = len(data)
        try:
            text = data.decode()
            limit = _ALIAS_FLOOR + _ALIAS_RATIO * len(text)
            obj, bomb = self._load(text, limit)
        except UnicodeDecodeError as exc:
            typed.decode_error(size, f"invalid UTF-8 at byte {exc.start}")
        except Exception as exc:  # noqa: BLE001
            # ruamel.yaml's constructors let KeyError (!!bool x), IndexError (!!int '')
            # and AssertionError (!!omap with a duplicate key) out, besides its own.
            typed.decode_error(size, f"not YAML: {one_line(exc)}")
        if bomb:
            typed.decode_error(size, f"aliases expand past {limit} nodes (a billion laughs)")
        value: T = typed.from_python(obj, size)
        return value

    def _load(self, text: str, limit: int) -> tuple[Any, bool]:
        """The document's data, or ``(None, True)`` if its aliases expand past ``limit``."""
        loader_class = _classes()[3]
        if loader_class is None:
            loader = self._loader
            bomb = "*" in text and _expands_past(loader.compose(text), limit)
            return (None if bomb else loader.load(text)), bomb
        loader = loader_class(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None, False
            if "*" in text and _expands_past(root, limit):
                return None, True
            return loader.construct_document(root), False
        finally:
            loader.dispose()


def _expands_past(root: Any, limit: int) -> bool:
    """Whether the document's aliases expand it to more than ``limit`` nodes."""
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
