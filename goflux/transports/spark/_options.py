"""The source's and the sink's options: parsed once from Spark's string options, picklable.

:class:`SourceOptions` (what to read and how) and :class:`SinkOptions` (how rows become
messages) travel to executors as Spark's string options and back. Option names
follow Spark's Kafka source where one exists (``startingOffsets``,
``maxMessagesPerTrigger`` for ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``includeHeaders``); keys are case-insensitive, as everywhere in Spark. The payload
type (``payloadType``) and a codec other than JSON (``payloadCodec``) travel pickled
with cloudpickle, or as a ``module:QualName`` import path.
"""

from __future__ import annotations

import base64
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pyspark.sql.types import BinaryType, StructType

from goflux._subjects import validate_pattern, validate_subject
from goflux.transports.spark._codec import check_sink_codec, check_source_codec
from goflux.transports.spark._connection import ConnectionOptions
from goflux.transports.spark._errors import SourceOptionError
from goflux.transports.spark._schema import PayloadColumns

__all__ = (
    "DEFAULT_MESSAGES_PER_PARTITION",
    "SinkOptions",
    "SourceOptions",
    "dump_type",
    "load_type",
    "parse_bool",
    "parse_positive_float",
    "parse_positive_int",
)

DEFAULT_MESSAGES_PER_PARTITION: Final = 50_000
_KNOWN: Final = frozenset(
    {
        "servers",
        "user",
        "password",
        "token",
        "credsfile",
        "nkeyseedfile",
        "tlscafile",
        "tlscertfile",
        "tlskeyfile",
        "connecttimeout",
        "stream",
        "subjects",
        "startingoffsets",
        "startingtimestamp",
        "endingoffsets",
        "maxmessagespertrigger",
        "failondataloss",
        "includeheaders",
        "ondecodeerror",
        "payloadtype",
        "payloadcodec",
        "metadataprefix",
        "messagesperpartition",
        "maxpartitions",
        "fetchsize",
        "idletimeout",
        "path",  # Spark adds it for load(path)
    }
)

Starting = Literal["earliest", "latest"] | int


def dump_type(type_: object, what: str = "payload type") -> str:
    """Encode a payload type (or a codec) for a Spark option.

    cloudpickle: by reference when importable, else by value. ``what`` names the
    object in the error.

    Raises:
        SourceOptionError: The object cannot be pickled.
    """
    from pyspark import cloudpickle  # noqa: PLC0415 - pyspark is this package's dependency

    dumps: Callable[[object], bytes] = cloudpickle.dumps
    try:
        data = dumps(type_)
    except Exception as exc:
        raise SourceOptionError(
            f"cannot pickle {what} {type_!r} for Spark's executors: {exc}"
        ) from exc
    return "pickle:" + base64.b64encode(data).decode("ascii")


def load_type(text: str, option: str = "payloadType") -> object:
    """Decode :func:`dump_type`'s output, or import ``module:QualName``.

    ``option`` names the Spark option in the error.

    Raises:
        SourceOptionError: The text names nothing importable or does not unpickle.
    """
    if text.startswith("pickle:"):
        import pickle  # noqa: PLC0415

        try:
            return pickle.loads(base64.b64decode(text[len("pickle:") :]))
        except Exception as exc:
            raise SourceOptionError(f"cannot unpickle option {option!r}: {exc}") from exc
    module_name, colon, qualname = text.partition(":")
    if not colon or not module_name or not qualname:
        raise SourceOptionError(f"option {option!r} must be 'module:QualName', got {text!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise SourceOptionError(f"option {option!r}: cannot import {text!r}: {exc}") from exc
    return target


def parse_bool(name: str, value: str) -> bool:
    """Parse ``true``/``false`` (any case).

    Raises:
        SourceOptionError: Anything else.
    """
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise SourceOptionError(f"option {name!r} must be true or false, got {value!r}")


def parse_positive_int(name: str, value: str) -> int:
    """Parse an integer >= 1.

    Raises:
        SourceOptionError: Not an integer, or < 1.
    """
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise SourceOptionError(f"option {name!r} must be an integer >= 1, got {value!r}")
    return number


def parse_positive_float(name: str, value: str) -> float:
    """Parse a finite number > 0 (seconds).

    Raises:
        SourceOptionError: Not a number, or not > 0.
    """
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not (number > 0 and math.isfinite(number)):
        raise SourceOptionError(f"option {name!r} must be a number > 0, got {value!r}")
    return number


def _intersect(first: list[str], second: list[str]) -> bool:
    """Report whether some subject matches both token patterns."""
    for index in range(max(len(first), len(second))):
        one = first[index] if index < len(first) else None
        two = second[index] if index < len(second) else None
        if one == ">":
            return two is not None
        if two == ">":
            return one is not None
        if one is None or two is None:
            return False
        if one not in (two, "*") and two != "*":
            return False
    return True


def _check_disjoint(subjects: tuple[str, ...]) -> None:
    """JetStream refuses a consumer whose filters overlap; say so before any task runs."""
    for index, first in enumerate(subjects):
        for second in subjects[index + 1 :]:
            if _intersect(first.split("."), second.split(".")):
                raise SourceOptionError(
                    f"subject filters {first!r} and {second!r} overlap; JetStream needs "
                    "disjoint filters (drop the narrower one)"
                )


def _parse_starting(value: str) -> Starting:
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return "earliest" if lowered == "earliest" else "latest"
    return parse_positive_int("startingOffsets", value)


def _parse_time(value: str) -> datetime:
    text = value.strip()
    if text.isdigit():
        return datetime.fromtimestamp(int(text) / 1000, UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SourceOptionError(
            f"option 'startingTimestamp' must be ISO-8601 or epoch milliseconds, got {value!r}"
        ) from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class SourceOptions:
    """Everything a source reader needs, on the driver and on executors.

    Attributes:
        connection: How to reach NATS.
        stream: The stream to read.
        subjects: Subject filters (empty: every subject of the stream).
        starting: Where a new query starts: earliest, latest or a sequence.
        starting_time: Start at the first message stored at or after this time
            (instead of ``starting``).
        ending: End of a batch read (exclusive sequence), or latest.
        max_messages_per_trigger: Upper bound of stream sequences per micro-batch.
        fail_on_data_loss: Fail when messages still to be read were deleted.
        include_headers: Add a ``headers`` column (every header line, repeats kept).
        on_decode_error: ``fail`` the batch, or put the bytes in ``_corrupt``.
        payload_type: The payload type (None: raw mode, a ``value`` bytes column).
        codec: The codec that decodes each payload into a ``payload_type`` (None:
            ``JsonCodec(payload_type)``).
        metadata_prefix: Prefix of the metadata columns (``subject``, ``seq``, ...).
        messages_per_partition: Sequences read by one Spark task.
        max_partitions: Most tasks one micro-batch is split into.
        fetch_size: Messages per pull request and per Arrow batch.
        idle_timeout: Seconds a task waits for a message before failing.

    Raises:
        SourceOptionError: ``codec`` is given in raw mode, or states another payload
            type than ``payload_type``.
        TypeError: ``codec`` is no codec (no ``decode``).
    """

    connection: ConnectionOptions
    stream: str
    subjects: tuple[str, ...] = ()
    starting: Starting = "earliest"
    starting_time: datetime | None = None
    ending: Literal["latest"] | int = "latest"
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    on_decode_error: Literal["fail", "corrupt"] = "fail"
    payload_type: Any = None
    codec: Any = None
    metadata_prefix: str = ""
    messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION
    max_partitions: int = 64
    fetch_size: int = 2_000
    idle_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.codec is not None:
            check_source_codec(self.codec, self.payload_type)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:  # noqa: PLR0912
        """Parse Spark's string options.

        Raises:
            SourceOptionError: An option is unknown, missing or malformed, or the
                codec does not fit the payload type.
            TypeError: ``payloadCodec`` holds no codec.
        """
        lowered = {key.lower(): value for key, value in options.items()}
        unknown = sorted(set(lowered) - _KNOWN)
        if unknown:
            raise SourceOptionError(
                f"unknown option(s) {', '.join(unknown)} for the goflux JetStream source"
            )
        stream = lowered.get("stream", "").strip()
        if not stream:
            raise SourceOptionError("option 'stream' is required: the JetStream stream to read")
        subjects = tuple(s.strip() for s in lowered.get("subjects", "").split(",") if s.strip())
        for subject in subjects:
            validate_pattern(subject)
        _check_disjoint(subjects)
        values: dict[str, Any] = {
            "connection": ConnectionOptions.from_options(options),
            "stream": stream,
            "subjects": subjects,
        }
        if "startingoffsets" in lowered and "startingtimestamp" in lowered:
            raise SourceOptionError("give startingOffsets or startingTimestamp, not both")
        if "startingoffsets" in lowered:
            values["starting"] = _parse_starting(lowered["startingoffsets"])
        if "startingtimestamp" in lowered:
            values["starting_time"] = _parse_time(lowered["startingtimestamp"])
        if "endingoffsets" in lowered:
            ending = lowered["endingoffsets"].strip().lower()
            values["ending"] = (
                "latest" if ending == "latest" else parse_positive_int("endingOffsets", ending)
            )
        if "maxmessagespertrigger" in lowered:
            values["max_messages_per_trigger"] = parse_positive_int(
                "maxMessagesPerTrigger", lowered["maxmessagespertrigger"]
            )
        for option, name in (
            ("failondataloss", "fail_on_data_loss"),
            ("includeheaders", "include_headers"),
        ):
            if option in lowered:
                values[name] = parse_bool(option, lowered[option])
        if "ondecodeerror" in lowered:
            mode = lowered["ondecodeerror"].strip().lower()
            if mode not in ("fail", "corrupt"):
                raise SourceOptionError(
                    f"option 'onDecodeError' must be fail or corrupt, got {mode!r}"
                )
            values["on_decode_error"] = mode
        if lowered.get("payloadtype", "").strip():
            values["payload_type"] = load_type(lowered["payloadtype"].strip())
        if lowered.get("payloadcodec", "").strip():
            values["codec"] = load_type(lowered["payloadcodec"].strip(), "payloadCodec")
        if "metadataprefix" in lowered:
            values["metadata_prefix"] = lowered["metadataprefix"]
        for option, name in (
            ("messagesperpartition", "messages_per_partition"),
            ("maxpartitions", "max_partitions"),
            ("fetchsize", "fetch_size"),
        ):
            if option in lowered:
                values[name] = parse_positive_int(option, lowered[option])
        if "idletimeout" in lowered:
            values["idle_timeout"] = parse_positive_float("idleTimeout", lowered["idletimeout"])
        return cls(**values)

    def to_options(self) -> dict[str, str]:
        """These options as Spark string options (the inverse of :meth:`parse`)."""
        out = self.connection.to_options()
        out["stream"] = self.stream
        if self.subjects:
            out["subjects"] = ",".join(self.subjects)
        if self.starting_time is not None:
            out["startingTimestamp"] = self.starting_time.isoformat()
        else:
            out["startingOffsets"] = str(self.starting)
        out["endingOffsets"] = str(self.ending)
        if self.max_messages_per_trigger is not None:
            out["maxMessagesPerTrigger"] = str(self.max_messages_per_trigger)
        out["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        out["includeHeaders"] = str(self.include_headers).lower()
        out["onDecodeError"] = self.on_decode_error
        if self.payload_type is not None:
            out["payloadType"] = dump_type(self.payload_type)
        if self.codec is not None:
            out["payloadCodec"] = dump_type(self.codec, "codec")
        out["metadataPrefix"] = self.metadata_prefix
        out["messagesPerPartition"] = str(self.messages_per_partition)
        out["maxPartitions"] = str(self.max_partitions)
        out["fetchSize"] = str(self.fetch_size)
        out["idleTimeout"] = repr(self.idle_timeout)
        return out


_SINK_KEYS = frozenset(
    {
        "subject",
        "subjectcolumn",
        "payloadtype",
        "payloadcodec",
        "keycolumn",
        "idprefix",
        "window",
        "publishtimeout",
        "checkpointlocation",
        "path",
    }
)


@dataclass(frozen=True)
class SinkOptions:
    """How rows become messages.

    Attributes:
        connection: How to reach NATS.
        subject: The subject of every message (or None with ``subject_column``).
        subject_column: A column holding each row's subject.
        payload_type: The message type built from each row; None publishes the
            ``value`` column's bytes as they are (raw mode).
        codec: The codec that encodes each ``payload_type`` value (None:
            ``JsonCodec(payload_type)``); it states ``payload_type`` as its ``.type``.
        key_column: A column whose value is each message's ID (it must identify the
            row across replays, whatever the partitioning); None: positional IDs.
        id_prefix: First part of positional IDs (default: the streaming query's ID).
        window: Most PubAcks outstanding per task.
        timeout: Seconds to wait for each PubAck.
    """

    connection: ConnectionOptions
    subject: str | None = None
    subject_column: str | None = None
    payload_type: Any = None
    codec: Any = None
    key_column: str | None = None
    id_prefix: str | None = None
    window: int = 1_000
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if (self.subject is None) == (self.subject_column is None):
            raise SourceOptionError("give either subject or subject_column")
        if self.subject is not None:
            validate_subject(self.subject)
        if self.window < 1:
            raise SourceOptionError(f"window must be >= 1, got {self.window}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise SourceOptionError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.codec is not None:
            check_sink_codec(self.codec, self.payload_type)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse Spark's string options (the sink's and the connection's).

        Raises:
            SourceOptionError: An option is unknown, missing or malformed.
        """
        lowered = {key.lower(): value for key, value in options.items()}
        connection = ConnectionOptions.from_options(options)
        known = _SINK_KEYS | {key.lower() for key in connection.to_options()}
        known |= {"user", "password", "token", "credsfile", "nkeyseedfile"}
        known |= {"tlscafile", "tlscertfile", "tlskeyfile", "connecttimeout"}
        unknown = sorted(set(lowered) - known)
        if unknown:
            raise SourceOptionError(
                f"unknown option(s) {', '.join(unknown)} for the goflux JetStream sink"
            )
        values: dict[str, Any] = {"connection": connection}
        for option, name in (
            ("subject", "subject"),
            ("subjectcolumn", "subject_column"),
            ("keycolumn", "key_column"),
            ("idprefix", "id_prefix"),
        ):
            if lowered.get(option, "").strip():
                values[name] = lowered[option].strip()
        if lowered.get("payloadtype", "").strip():
            values["payload_type"] = load_type(lowered["payloadtype"].strip())
        if lowered.get("payloadcodec", "").strip():
            values["codec"] = load_type(lowered["payloadcodec"].strip(), "payloadCodec")
        if "window" in lowered:
            values["window"] = parse_positive_int("window", lowered["window"])
        if "publishtimeout" in lowered:
            values["timeout"] = parse_positive_float("publishTimeout", lowered["publishtimeout"])
        return cls(**values)

    def to_options(self) -> dict[str, str]:
        """These options as Spark string options (the inverse of :meth:`parse`)."""
        out = self.connection.to_options()
        for name, option in (
            ("subject", "subject"),
            ("subject_column", "subjectColumn"),
            ("key_column", "keyColumn"),
            ("id_prefix", "idPrefix"),
        ):
            value = getattr(self, name)
            if value is not None:
                out[option] = value
        if self.payload_type is not None:
            out["payloadType"] = dump_type(self.payload_type)
        if self.codec is not None:
            out["payloadCodec"] = dump_type(self.codec, "codec")
        out["window"] = str(self.window)
        out["publishTimeout"] = repr(self.timeout)
        return out

    def check_columns(self, schema: StructType) -> None:
        """Check that the DataFrame has the columns these options read.

        Raises:
            SourceOptionError: A named column is missing, or raw mode lacks a binary
                ``value`` column.
            SchemaError: The payload type has no Spark schema.
        """
        names = set(schema.fieldNames())
        for option, column in (
            ("subject_column", self.subject_column),
            ("key_column", self.key_column),
        ):
            if column is not None and column not in names:
                raise SourceOptionError(f"{option} {column!r} is not a column of the DataFrame")
        if self.payload_type is None:
            if "value" not in names or not isinstance(schema["value"].dataType, BinaryType):
                raise SourceOptionError(
                    "raw mode (no payload type) publishes a binary 'value' column, "
                    "which the DataFrame does not have"
                )
        else:
            missing = [n for n in PayloadColumns(self.payload_type).names if n not in names]
            if missing:
                raise SourceOptionError(
                    f"the DataFrame lacks column(s) {', '.join(missing)} of "
                    f"{getattr(self.payload_type, '__name__', self.payload_type)}"
                )
