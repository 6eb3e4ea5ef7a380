"""The codecs of the source and the sinks: which are accepted, and their payload type.

The payload's fields are the Spark columns whatever the codec: the codec only turns
payload values into message bytes and back. A codec that states its payload type
(``.type``: :class:`~goflux.JsonCodec`, :class:`~goflux.codecs.MsgpackCodec`,
``pipe(MsgpackCodec(T), Gzip())``, ...) must state the payload type of the columns.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from goflux._codecs import BytesCodec, type_name
from goflux.transports.spark._errors import SourceOptionError

__all__ = (
    "PayloadCodec",
    "check_sink_codec",
    "check_source_codec",
    "sink_payload_type",
    "stated_type",
)

T = TypeVar("T")


class PayloadCodec(Protocol[T]):
    """A :class:`~goflux.Codec` that states its payload type as ``.type``.

    What the sinks take besides :class:`~goflux.BytesCodec`: :class:`~goflux.JsonCodec`,
    the serialization codecs of :mod:`goflux.codecs` (``MsgpackCodec(T)``,
    ``YamlCodec(T)``, ...) and a :func:`~goflux.codecs.pipe` that starts with one.
    """

    @property
    def type(self) -> object:
        """The payload type."""
        ...

    def encode(self, value: T, /) -> bytes:
        """Return the wire bytes for ``value``."""
        ...

    def decode(self, data: bytes, /) -> T:
        """Return the value the wire bytes ``data`` carry."""
        ...


def stated_type(codec: object) -> object:
    """The payload type ``codec`` states (its ``.type``), or None if it states none."""
    return getattr(codec, "type", None)


def _same_type(first: object, second: object) -> bool:
    try:
        return first is second or bool(first == second)
    except Exception:  # noqa: BLE001 - a type form whose == raises matches nothing
        return False


def check_source_codec(codec: object, payload_type: object) -> None:
    """Check that ``codec`` can decode the source's payloads into ``payload_type``.

    Raises:
        SourceOptionError: ``payload_type`` is None (raw mode has no codec), or the
            payload type the codec states is another one.
        TypeError: ``codec`` has no ``decode`` method.
    """
    if not callable(getattr(codec, "decode", None)):
        raise TypeError(f"codec must be a goflux Codec (with decode), got {codec!r}")
    if payload_type is None:
        raise SourceOptionError(
            f"codec {codec!r} given with payload_type=None: raw mode reads each payload's "
            "bytes as they are (a 'value' column) and decodes nothing; pass the payload "
            "type to decode, e.g. read(spark, Order, codec=MsgpackCodec(Order))"
        )
    stated = stated_type(codec)
    if stated is not None and not _same_type(stated, payload_type):
        raise SourceOptionError(
            f"codec {codec!r} decodes {type_name(stated)}, but the payload type is "
            f"{type_name(payload_type)}: give a codec of {type_name(payload_type)}"
        )


def check_sink_codec(codec: object, payload_type: object) -> None:
    """Check that ``codec`` encodes values of ``payload_type`` (the sink's own options).

    Raises:
        SourceOptionError: ``payload_type`` is None (raw mode publishes the bytes as
            they are), or ``codec`` states no payload type or another one.
    """
    stated = stated_type(codec)
    if payload_type is None or stated is None or not _same_type(stated, payload_type):
        raise SourceOptionError(
            f"the sink's codec {codec!r} must state the payload type {payload_type!r} "
            "as its .type (raw mode, without a payload type, takes no codec)"
        )


def sink_payload_type(codec: object) -> Any:
    """The payload type the rows become before ``codec`` encodes them (None: raw bytes).

    Raises:
        TypeError: ``codec`` is neither a :class:`~goflux.BytesCodec` nor a codec that
            states its payload type (``.type``).
    """
    if isinstance(codec, BytesCodec):
        return None
    stated = stated_type(codec)
    if stated is None or not callable(getattr(codec, "encode", None)):
        raise TypeError(
            "codec must state its payload type, as JsonCodec(T), MsgpackCodec(T), "
            "YamlCodec(T) or pipe(MsgpackCodec(T), Gzip()) do (their .type), or be "
            f"BytesCodec() for a binary 'value' column; got {codec!r}"
        )
    return stated
