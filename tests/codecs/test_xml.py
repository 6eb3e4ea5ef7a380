from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import XmlCodec
from tests.codecs.models import EMPTY, NESTED, SAMPLES, UNICODE, Order, large


class Data(BaseModel):
    name: str


class Numbers(BaseModel):
    count: int
    ratios: list[float]
    flag: bool
    at: datetime
    grid: list[list[int]]
    labels: dict[str, str]
    maybe: int | None = None


@dataclass
class Point:
    x: int
    y: int


def test_golden_encoding_xml_example() -> None:
    # goencode xml ExampleNewCodec: Data{XMLName: "data", Name: "example-123"}
    codec = XmlCodec(Data, root="data")
    assert codec.encode(Data(name="example-123")) == b"<data><name>example-123</name></data>"
    assert codec.decode(b"<data><name>example-123</name></data>") == Data(name="example-123")


def test_the_root_is_the_type_name_as_go_names_a_struct() -> None:
    assert XmlCodec(Point).encode(Point(1, 2)) == b"<Point><x>1</x><y>2</y></Point>"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(name: str) -> None:
    codec = XmlCodec(Order)
    assert codec.decode(codec.encode(SAMPLES[name])) == SAMPLES[name]


def test_round_trip_of_a_megabyte() -> None:
    codec = XmlCodec(Order)
    order = large()
    data = codec.encode(order)
    assert len(data) > 1_000_000
    assert codec.decode(data) == order


def test_lists_repeat_the_field_element() -> None:
    data = XmlCodec(Order).encode(NESTED)
    assert data.startswith(b"<Order><id>o-1</id><customerId>c-1</customerId><lines><sku>a-1</sku>")
    assert b"<tags>rush</tags><tags>gift</tags>" in data
    assert b"<discount>1.5</discount></Order>" in data


def test_a_one_item_list_and_an_empty_list() -> None:
    one = Order.model_validate({**NESTED.model_dump(), "tags": ["solo"], "lines": []})
    codec = XmlCodec(Order)
    data = codec.encode(one)
    assert b"<lines>" not in data
    assert codec.decode(data) == one


def test_leaves_as_go_writes_them() -> None:
    value = Numbers(
        count=-3,
        ratios=[1e6, 0.5, math.inf, 100.0],
        flag=True,
        at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        grid=[[1, 2], [3]],
        labels={"en": "hello"},
    )
    data = XmlCodec(Numbers).encode(value)
    assert data == (
        b"<Numbers><count>-3</count><ratios>1e+06</ratios><ratios>0.5</ratios>"
        b"<ratios>+Inf</ratios><ratios>100</ratios><flag>true</flag>"
        b"<at>2026-01-02T03:04:05+00:00</at>"
        b"<grid><item>1</item><item>2</item></grid><grid><item>3</item></grid>"
        b"<labels><en>hello</en></labels></Numbers>"
    )
    assert XmlCodec(Numbers).decode(data) == value


def test_reads_what_go_writes_with_attributes_and_namespaces_ignored() -> None:
    go = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<Numbers xmlns="urn:x" kind="k">\n  <count>7</count>\n  <ratios>NaN</ratios>\n'
        b"  <flag>false</flag>\n  <at>2026-01-02T03:04:05.123456789Z</at>\n"
        b"  <unknown>ignored</unknown>\n  <labels></labels>\n</Numbers>"
    )
    value = XmlCodec(Numbers).decode(go)
    assert value.count == 7
    assert math.isnan(value.ratios[0])
    assert value.grid == []  # no element: an empty list, as Go's nil slice
    assert value.labels == {}
    assert value.at == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def test_escapes_and_carriage_returns_survive() -> None:
    text = "a<b & c>d \"q\" 'a' \r\n\ttab"
    codec = XmlCodec(Data)
    data = codec.encode(Data(name=text))
    assert b"&#xD;" in data
    assert codec.decode(data) == Data(name=text)


def test_plain_types_need_a_root_name() -> None:
    codec = XmlCodec(list[int], root="ints")
    assert codec.encode([1, 2]) == b"<ints><item>1</item><item>2</item></ints>"
    assert codec.decode(b"<ints><item>1</item><item>2</item></ints>") == [1, 2]
    with pytest.raises(TypeError, match="root="):
        XmlCodec(list[int])


def test_entity_bomb_is_refused_quickly() -> None:
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    ]
    doctype = f"<!DOCTYPE Data [{''.join(entities)}]>"
    bomb = f'<?xml version="1.0"?>{doctype}<Data><name>&lol9;</name></Data>'
    started = time.perf_counter()
    with pytest.raises(DecodeError, match="not XML") as info:
        XmlCodec(Data).decode(bomb.encode())
    assert time.perf_counter() - started < 1.0
    assert info.value.type_name == "Data"


def test_any_entity_declaration_is_refused() -> None:
    # A parser without defusedxml expands this one; a thousand of them would be a bomb.
    small = b'<?xml version="1.0"?><!DOCTYPE Data [<!ENTITY a "x">]><Data><name>&a;</name></Data>'
    with pytest.raises(DecodeError, match="EntitiesForbidden"):
        XmlCodec(Data).decode(small)


def test_external_entities_are_refused() -> None:
    xxe = b'<?xml version="1.0"?><!DOCTYPE Data [<!ENTITY x SYSTEM "file:///etc/passwd">]><Data><name>&x;</name></Data>'
    with pytest.raises(DecodeError, match="not XML"):
        XmlCodec(Data).decode(xxe)


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"", "not XML"),
        (b"<Data><name>x</name>", "not XML"),  # truncated
        (b"<Data><name>x</nam></Data>", "not XML"),
        (b"\xff\xfe<", "not XML"),
        (b"<Data></Data>", "name: Field required"),
    ],
)
def test_decode_errors_name_the_type_and_cause(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError, match=cause) as info:
        XmlCodec(Data).decode(data)
    assert info.value.type_name == "Data"
    assert info.value.size == len(data)


def test_encode_errors() -> None:
    with pytest.raises(EncodeError, match="cannot encode Data as Order"):
        XmlCodec(Order).encode(Data(name="x"))  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="XML cannot carry"):
        XmlCodec(Data).encode(Data(name="bell\x07"))
    with pytest.raises(EncodeError, match="not an XML element name"):
        XmlCodec(dict[str, int], root="m").encode({"has space": 1})


def test_recursive_models() -> None:
    class Node(BaseModel):
        name: str
        children: list[Node] = []

    tree = Node(name="a", children=[Node(name="b", children=[Node(name="c")])])
    codec = XmlCodec(Node)
    assert codec.decode(codec.encode(tree)) == tree


def test_repr_content_type_and_typing() -> None:
    assert repr(XmlCodec(Order)) == "XmlCodec(Order)"
    assert repr(XmlCodec(Data, root="data")) == "XmlCodec(Data, root='data')"
    assert XmlCodec.content_type == "application/xml"
    as_codec: Codec[Order] = XmlCodec(Order)
    assert as_codec.decode(as_codec.encode(UNICODE)) == UNICODE
    assert as_codec.decode(as_codec.encode(EMPTY)) == EMPTY
    untyped: XmlCodec[Any] = XmlCodec(dict[str, Any], root="m")
    assert untyped.decode(b"<m><a>1</a><a>2</a><b>x</b></m>") == {"a": ["1", "2"], "b": "x"}
