"""Composition: :func:`pipe` chains codecs the way goencode's ``PipeCodec`` does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from goflux._codecs import Codec, content_type_of, type_name
from goflux._errors import CodecError, DecodeError, EncodeError
from goflux.codecs._csv import CsvCodec

__all__ = ("Pipe", "pipe")

T = TypeVar("T")


def _stages(codec: object) -> tuple[object, ...]:
    if isinstance(codec, Pipe):
        return codec.stages
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        raise TypeError(f"pipe takes codecs (with encode and decode), not {type(codec).__name__}")
    return (codec,)


class Pipe(Generic[T]):
    """Codecs in a row: a ``Codec[T]`` whose bytes pass through ``Codec[bytes]`` stages.

    Made by :func:`pipe`. Encoding runs the stages first to last, decoding last to
    first, as goencode's ``PipeCodec``. A stage's :class:`~goflux.EncodeError` or
    :class:`~goflux.DecodeError` comes out as one of the same kind that names the
    stage (its number and repr), with the stage's own error as its ``__cause__``.

    Content type: :attr:`content_type` is what the bytes on the wire are (for
    ``pipe(JsonCodec(Order), Gzip())``, ``application/gzip``), so a reader that knows
    only ``content_type`` is told the truth. Where the last stages are HTTP content
    codings (gzip, br, zstd), :attr:`content_encoding` names them in the order
    applied and :attr:`decoded_content_type` is the type under them
    (``application/json``): what the bytes would be called as HTTP's ``Content-Type``
    and ``Content-Encoding``. goflux's HTTP transport sends :attr:`content_type` and
    never a ``Content-Encoding`` (an HTTP client would undo the compression before the
    codec could), so both sides of a route must use the pipe.
    """

    __slots__ = ("_decoders", "_encoders", "_name", "_stages", "_type_name")

    def __init__(self, first: Codec[T], /, *rest: Codec[bytes]) -> None:
        stages = _stages(first) + tuple(s for codec in rest for s in _stages(codec))
        self._stages = stages
        self._encoders = tuple(cast(Any, stage).encode for stage in stages)
        self._decoders = tuple(cast(Any, stage).decode for stage in stages)
        inner = getattr(stages[0], "type", None)
        name = "bytes" if inner is None else type_name(inner)
        # A CsvCodec(Row) states its row type and carries a list of rows: its errors
        # name list[Row], and so do the pipe's.
        self._type_name = f"list[{name}]" if isinstance(stages[0], CsvCodec) else name
        self._name = f"pipe({', '.join(repr(stage) for stage in stages)})"

    @property
    def stages(self) -> tuple[object, ...]:
        """The codecs, first to last (nested pipes flattened)."""
        return self._stages

    @property
    def type(self) -> object:
        """The payload type the first stage states (``JsonCodec(Order).type``), or None.

        A pipe that starts with ``CsvCodec(Row)`` states ``Row``, as the codec does: it
        carries a ``list[Row]``.
        """
        return getattr(self._stages[0], "type", None)

    @property
    def content_type(self) -> str | None:
        """The MIME type of the bytes it writes: the last stage's that states one."""
        for stage in reversed(self._stages):
            found = content_type_of(stage)
            if found is not None:
                return found
        return None

    @property
    def content_encoding(self) -> str | None:
        """The HTTP content codings of the last stages, in the order applied, or None.

        ``"gzip"`` for ``pipe(JsonCodec(Order), Gzip())``; ``"gzip, br"`` (HTTP's
        ``Content-Encoding`` syntax) for a pipe ending in gzip then Brotli.
        """
        codings = self._codings()
        return ", ".join(codings) if codings else None

    @property
    def decoded_content_type(self) -> str | None:
        """The MIME type of the bytes under :attr:`content_encoding` (None if none)."""
        count = len(self._codings())
        if count == 0:
            return None
        for stage in reversed(self._stages[: len(self._stages) - count]):
            found = content_type_of(stage)
            if found is not None:
                return found
        return None

    def _codings(self) -> list[str]:
        codings: list[str] = []
        for stage in reversed(self._stages[1:]):
            coding = getattr(stage, "content_coding", None)
            if not isinstance(coding, str):
                break
            codings.append(coding)
        codings.reverse()
        return codings

    def __repr__(self) -> str:
        return self._name

    def encode(self, value: T, /) -> bytes:
        """Run ``value`` through every stage, first to last.

        Raises:
            EncodeError: A stage failed; the message names it.
        """
        encoders = self._encoders
        index = 0
        try:
            out = encoders[0](value)
            for index in range(1, len(encoders)):
                out = encoders[index](out)
        except CodecError as exc:
            raise self._failed(EncodeError, index, exc) from exc
        return cast(bytes, out)

    def decode(self, data: bytes, /) -> T:
        """Run ``data`` through every stage's decoder, last to first.

        Raises:
            DecodeError: A stage failed; the message names it.
        """
        decoders = self._decoders
        index = len(decoders) - 1
        out: Any = data
        try:
            while index >= 0:
                out = decoders[index](out)
                index -= 1
        except CodecError as exc:
            raise self._failed(DecodeError, index, exc, size=_size(data)) from exc
        return cast(T, out)

    def _failed(
        self,
        kind: Callable[..., CodecError],
        index: int,
        exc: CodecError,
        *,
        size: int | None = None,
    ) -> CodecError:
        """The error naming stage ``index``: an EncodeError, or a DecodeError of ``size`` bytes."""
        where = f"stage {index + 1} of {len(self._stages)} ({self._stages[index]!r}) failed"
        if size is None:
            return kind(f"{self._name}: {where}: {exc}", type_name=self._type_name)
        return kind(f"{self._name}: {where}: {exc}", type_name=self._type_name, size=size)


def _size(data: object) -> int:
    """How many bytes ``data`` is, 0 if it is not bytes-like (as the stages say)."""
    if isinstance(data, bytes | bytearray):
        return len(data)
    if isinstance(data, memoryview):
        try:
            return data.nbytes
        except ValueError:  # released
            return 0
    return 0


def pipe(first: Codec[T], /, *rest: Codec[bytes]) -> Pipe[T]:
    """Chain codecs: ``first`` turns a ``T`` into bytes, each of ``rest`` transforms bytes.

    goencode's order: encoding runs ``first`` then each of ``rest`` in turn; decoding
    runs them backwards. ``pipe(JsonCodec(Order), Gzip())`` is a ``Codec[Order]``
    (typed ``Pipe[Order]``) that writes gzip-compressed JSON, what Go's
    ``goencode.PipeCodec(json.NewCodec[Order](), gzip.NewCodec())`` writes.

    Raises:
        TypeError: An argument is not a codec.
    """
    return Pipe(first, *rest)
