from __future__ import annotations

import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml as pyyaml
from pydantic import BaseModel

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import YamlCodec
from goflux.codecs._yaml import MAX_DEPTH
from tests.codecs.models import EMPTY, NESTED, SAMPLES, UNICODE, Order, large


class Data(BaseModel):
    name: str


class Scalars(BaseModel):
    """Strings that YAML 1.1 and 1.2 readers resolve differently when plain."""

    zip: str = "08001"
    answer: str = "no"
    switch: str = "on"
    yes: str = "y"
    day: str = "2001-12-14"
    stamp: str = "2001-12-14T21:59:43.10Z"
    null: str = "null"
    tilde: str = "~"
    true: str = "true"
    octal: str = "0o17"
    hex: str = "0x1F"
    sexagesimal: str = "1:20"
    exponent: str = "1e3"
    infinity: str = ".inf"
    underscored: str = "1_000"
    empty: str = ""
    spaced: str = " padded "
    multiline: str = "one\ntwo\n"


class Typed(BaseModel):
    count: int
    ratio: float
    flag: bool
    day: date
    at: datetime
    raw: bytes
    missing: int | None


def test_golden_yaml_v3_example() -> None:
    # goencode yaml/v3 ExampleNewCodec: Encoded: name: example-123
    assert YamlCodec(Data).encode(Data(name="example-123")) == b"name: example-123\n"


def test_fields_in_declaration_order_as_yaml_v3_writes_a_struct() -> None:
    text = YamlCodec(Order).encode(NESTED).decode()
    keys = [line.split(":")[0] for line in text.splitlines() if not line.startswith((" ", "-"))]
    assert keys == [
        "id", "customerId", "lines", "tags", "note", "paid", "created", "discount"
    ]  # fmt: skip
    assert "- sku: a-1\n  qty: 2\n  price: 12.5\n" in text


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name: str) -> None:
    codec = YamlCodec(Order)
    assert codec.decode(codec.encode(SAMPLES[name])) == SAMPLES[name]


@pytest.mark.slow  # bulk data
def test_round_trip_of_a_megabyte() -> None:
    codec = YamlCodec(Order)
    order = large()
    data = codec.encode(order)
    assert len(data) > 1_000_000
    assert codec.decode(data) == order


def test_ambiguous_strings_are_quoted_for_yaml_1_1_and_1_2_readers() -> None:
    data = YamlCodec(Scalars).encode(Scalars())
    # PyYAML reads YAML 1.1: every value still comes back a string.
    assert pyyaml.safe_load(data) == Scalars().model_dump()
    for plain in (b"zip: 08001", b"answer: no", b"switch: on", b"yes: y", b"day: 2001"):
        assert plain not in data
    assert YamlCodec(Scalars).decode(data) == Scalars()


def test_reads_yaml_1_2_plain_scalars() -> None:
    class Plain(BaseModel):
        answer: str
        switch: str
        yes: str
        day: str
        zip: int
        octal: int
        flag: bool

    text = b"answer: no\nswitch: on\nyes: y\nday: 2001-12-14\nzip: 08001\noctal: 0o17\nflag: true\n"
    assert YamlCodec(Plain).decode(text) == Plain(
        answer="no", switch="on", yes="y", day="2001-12-14", zip=8001, octal=15, flag=True
    )


def test_a_plain_08001_is_a_number_in_yaml_1_2() -> None:
    # yaml.v3 and js-yaml read it as 8001 too: writers quote the string "08001".
    with pytest.raises(DecodeError, match="zip: Input should be a valid string"):
        YamlCodec(Scalars).decode(b"zip: 08001\n")


def test_types_as_go_writes_them() -> None:
    value = Typed(
        count=3,
        ratio=math.inf,
        flag=False,
        day=date(2026, 1, 2),
        at=datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
        raw=b"\x00\xff",
        missing=None,
    )
    data = YamlCodec(Typed).encode(value)
    text = data.decode()
    assert "ratio: .inf\n" in text
    assert "flag: false\n" in text
    assert "day: 2026-01-02\n" in text  # plain: yaml.v3 reads it into time.Time
    assert "at: 2026-01-02T03:04:05.600000+00:00\n" in text
    assert "raw: !!binary" in text
    assert "missing: null\n" in text
    assert YamlCodec(Typed).decode(data) == value


def test_nan_travels() -> None:
    codec = YamlCodec(list[float])
    assert math.isnan(codec.decode(codec.encode([math.nan]))[0])


def test_no_anchors_are_written() -> None:
    shared = ["a", "b"]
    data = YamlCodec(dict[str, list[str]]).encode({"x": shared, "y": shared})
    assert b"&" not in data
    assert b"*" not in data


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        name, previous = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]")
    started = time.perf_counter()
    with pytest.raises(DecodeError, match="billion laughs"):
        YamlCodec(dict[str, Any]).decode("\n".join(lines).encode())
    assert time.perf_counter() - started < 1.0


def test_a_few_aliases_are_fine() -> None:
    text = b"base: &b {sku: a, qty: 1, price: 1.5}\nlines: [*b, *b]\n"
    assert YamlCodec(dict[str, Any]).decode(text)["lines"][1]["qty"] == 1


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"name: [unclosed\n", "not YAML"),
        (b"name: 'open", "not YAML"),
        (b"name: a\nname: b\n", "not YAML"),  # duplicate key, as yaml.v3 refuses it
        (b"name: a\n---\nname: b\n", "not YAML"),  # two documents
        (b"\xff\xfe", "invalid UTF-8"),
        (b"- a\n", "Input should be a valid dictionary"),
        (b"", "Input should be a valid dictionary"),
        (b"name: !!python/object:os.system x\n", "not YAML"),
    ],
)
def test_decode_errors_name_the_type_and_cause(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        YamlCodec(Data).decode(data)
    assert info.value.type_name == "Data"
    assert info.value.size == len(data)


def test_encode_refuses_the_wrong_type() -> None:
    with pytest.raises(EncodeError, match="cannot encode Data as Order") as info:
        YamlCodec(Order).encode(Data(name="x"))  # type: ignore[arg-type]
    assert info.value.type_name == "Order"


def test_repr_content_type_and_typing() -> None:
    codec = YamlCodec(Order)
    assert repr(codec) == "YamlCodec(Order)"
    assert codec.content_type == "application/yaml"
    assert codec.type is Order
    as_codec: Codec[Order] = codec
    assert as_codec.decode(codec.encode(NESTED)) == NESTED


def test_unicode_is_written_as_is() -> None:
    data = YamlCodec(Order).encode(UNICODE)
    assert "日本語".encode() in data
    assert YamlCodec(Order).decode(data) == UNICODE
    assert YamlCodec(Order).decode(YamlCodec(Order).encode(EMPTY)) == EMPTY


def test_threads_each_get_their_own_parser() -> None:
    codec = YamlCodec(Order)
    data = codec.encode(NESTED)

    def work(_: int) -> bool:
        return all(codec.decode(codec.encode(NESTED)) == NESTED for _ in range(20))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))
    assert codec.decode(data) == NESTED


_DEEP_DOCUMENT = """
import threading
from typing import Any
from goflux import DecodeError
from goflux.codecs import YamlCodec

def decode(data: bytes) -> None:
    try:
        YamlCodec(Any).decode(data)
    except DecodeError as exc:
        assert "nested deeper than" in str(exc), exc
        print("DecodeError")

for data in (
    b"[" * 30000 + b"]" * 30000,
    b"- " * 30000 + b"x",
    b"{a: " * 30000 + b"x" + b"}" * 30000,
    b"a: &a " + b"[" * 30000 + b"]" * 30000 + b"\\nb: *a",
):
    decode(data)
    worker = threading.Thread(target=decode, args=(data,))
    worker.start()
    worker.join()
"""


def test_deep_nesting_is_a_decode_error_not_a_crash() -> None:
    # ruamel.yaml's C composer recurses on the C stack: 30000 "[" overflow it (SIGSEGV).
    done = subprocess.run(
        [sys.executable, "-c", _DEEP_DOCUMENT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-300:]}"
    assert done.stdout.split() == ["DecodeError"] * 8


def test_nesting_up_to_the_limit_decodes() -> None:
    codec = YamlCodec(Any)
    value: Any = "x"
    for _ in range(200):
        value = [value]
    assert codec.decode(codec.encode(value)) == value
    assert codec.decode(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(DecodeError, match=f"nested deeper than {MAX_DEPTH}"):
        codec.decode(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))


def test_deep_nesting_is_an_encode_error() -> None:
    value: Any = []
    for _ in range(3000):
        value = [value]
    with pytest.raises(EncodeError, match="cannot encode list as Any"):
        YamlCodec(Any).encode(value)


@pytest.mark.parametrize(
    "text",
    ["a\u2028b", " \u2028", "\xa0\u2028  #:", "x\u2029 y", "x\x85y", "\u2028", "one\ntwo\u2028"],
)
def test_unicode_line_separators_are_escaped(text: str) -> None:
    # Written as is, YAML 1.1 emitters fold them as line breaks: a YAML 1.2 reader
    # (yaml.v3, js-yaml) reads other text. Double-quoted, they are \\L, \\P and \\N.
    data = YamlCodec(Data).encode(Data(name=text))
    assert not {"\u2028", "\u2029", "\x85"} & set(data.decode())
    assert pyyaml.safe_load(data) == {"name": text}
    assert YamlCodec(Data).decode(data) == Data(name=text)


def test_an_anchor_defined_again_names_the_later_node() -> None:
    # YAML 1.2 allows it; yaml.v3 and js-yaml read the alias as the later node.
    text = b"a: &x 1\nb: &x 2\nc: *x\n"
    assert YamlCodec(dict[str, int]).decode(text) == {"a": 1, "b": 2, "c": 2}


def _deep_list() -> Any:
    value: Any = 1
    for _ in range(1000):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(_deep_list(), id="deep"),
        pytest.param("\ud800", id="surrogate"),
        pytest.param({"\udc00": 1}, id="surrogate-key"),
        pytest.param({"a": "x", "b": "\ud800"}, id="surrogate-late"),
        pytest.param({"a": object()}, id="unknown-type"),
    ],
)
def test_a_failed_encode_leaves_the_codec_working(bad: Any) -> None:
    # The per-thread dumper was left mid-document: every later encode wrote b"".
    codec = YamlCodec(Any)
    with pytest.raises(EncodeError):
        codec.encode(bad)
    for _ in range(2):
        data = codec.encode({"ok": 1})
        assert data == b"ok: 1\n"
        assert codec.decode(data) == {"ok": 1}


@pytest.mark.parametrize(
    "data",
    [b"!!bool x\n", b"!!int ''\n", b"!!float ''\n", b"!!omap [a: 1, a: 2]\n", b"!!int x\n"],
)
def test_a_failure_constructing_a_value_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError, match="not YAML") as caught:
        YamlCodec(Any).decode(data)
    assert caught.value.__context__ is not None  # the constructor's error, chained


class Stamp(BaseModel):
    at: datetime


def test_an_offset_with_seconds_is_an_encode_error() -> None:
    # Before 1900 zones ran on local mean time: Amsterdam was +00:19:32. RFC 3339 (and
    # pydantic reading it back) takes whole minutes only.
    at = datetime(1890, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam"))
    with pytest.raises(EncodeError, match=r"whole minutes.*at"):
        YamlCodec(Stamp).encode(Stamp(at=at))
    codec = YamlCodec(Stamp)
    later = Stamp(at=datetime(1990, 1, 1, tzinfo=ZoneInfo("Europe/Amsterdam")))
    assert codec.decode(codec.encode(later)) == later
