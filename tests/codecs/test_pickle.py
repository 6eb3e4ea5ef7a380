"""Every codec survives pickling: Spark ships a source's or a sink's codec to executors."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest

from goflux import DecodeError, JsonCodec
from goflux.codecs import (
    Ascii85,
    Base32,
    Base64,
    Brotli,
    CsvCodec,
    Flate,
    Gzip,
    Hex,
    MsgpackCodec,
    Snappy,
    TomlCodec,
    XmlCodec,
    YamlCodec,
    Zstd,
    pipe,
)
from tests.codecs.models import NESTED, Line, Order

CODECS: dict[str, Callable[[], Any]] = {
    "json": lambda: JsonCodec(Order),
    "msgpack": lambda: MsgpackCodec(Order, strict=True),
    "yaml": lambda: YamlCodec(Order),
    "toml": lambda: TomlCodec(Order),
    "xml": lambda: XmlCodec(Order, root="order"),
    "gzip": lambda: pipe(MsgpackCodec(Order), Gzip(9, max_size=1 << 20)),
    "flate": lambda: pipe(JsonCodec(Order), Flate()),
    "zstd": lambda: pipe(MsgpackCodec(Order), Zstd(7, max_size=1 << 20)),
    "brotli": lambda: pipe(YamlCodec(Order), Brotli(3)),
    "snappy": lambda: pipe(JsonCodec(Order), Snappy(max_size=None)),
    "text": lambda: pipe(JsonCodec(Order), Base64(), Base32(), Hex(), Ascii85()),
}


@pytest.mark.parametrize("name", CODECS)
def test_a_pickled_codec_writes_and_reads_what_the_original_does(name: str) -> None:
    codec = CODECS[name]()
    copy = pickle.loads(pickle.dumps(codec))
    assert repr(copy) == repr(codec)
    data = codec.encode(NESTED)
    assert copy.encode(NESTED) == data
    assert copy.decode(data) == NESTED
    assert getattr(copy, "type", None) is Order


def test_a_pickled_csv_codec_reads_its_rows() -> None:
    codec = CsvCodec(Line)
    copy = pickle.loads(pickle.dumps(codec))
    assert copy.decode(codec.encode(NESTED.lines)) == NESTED.lines


def test_a_pickled_pipe_keeps_its_decompression_bound() -> None:
    copy = pickle.loads(pickle.dumps(pipe(YamlCodec(Order), Zstd(max_size=64))))
    big = YamlCodec(Order).encode(NESTED)
    assert len(big) > 64
    with pytest.raises(DecodeError, match="64"):
        copy.decode(Zstd(max_size=None).encode(big))
