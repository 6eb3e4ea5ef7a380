from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from goflux import Codec, DecodeError, EncodeError
from goflux.codecs import XmlCodec
from tests.codecs.models import EMPTY, NESTED, SAMPLES, UNICODE, Order, Ratio, Status, large


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


@pytest.mark.slow  # bulk data
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


class Named(BaseModel):
    id: int
    name: str


def test_nesting_deeper_than_python_recurses_is_a_decode_error() -> None:
    deep = b"<Named><id>1</id><name>" + b"<a>" * 2000 + b"</a>" * 2000 + b"</name></Named>"
    with pytest.raises(DecodeError, match="nested too deeply") as info:
        XmlCodec(Named).decode(deep)
    assert info.value.type_name == "Named"


class Free(BaseModel):
    extra: Any


def test_nesting_deeper_than_python_recurses_is_an_encode_error() -> None:
    value: Any = "x"
    for _ in range(3000):
        value = {"a": value}
    with pytest.raises(EncodeError, match="cannot encode Free as Free: nested too deeply"):
        XmlCodec(Free).encode(Free(extra=value))


class Scores(BaseModel):
    by_name: dict[str, list[int]]


class Either(BaseModel):
    v: int | list[int]


@pytest.mark.parametrize(
    "value",
    [
        Scores(by_name={"ann": [7]}),
        Scores(by_name={"ann": [7, 8], "bob": [1]}),
        Either(v=5),
        Free(extra="text"),
        Free(extra={"k": "v", "deeper": {"k": ""}}),
        Free(extra=None),
    ],
    ids=repr,
)
def test_what_xml_can_tell_apart_round_trips(value: BaseModel) -> None:
    codec: XmlCodec[Any] = XmlCodec(type(value))
    assert codec.decode(codec.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        (Scores(by_name={"ann": []}), "by_name.ann: XML writes an empty list as nothing"),
        (Either(v=[1, 2, 3]), "v: a union of lists and single values cannot hold a list"),
        (Either(v=[1]), "v: a union of lists and single values cannot hold a list"),
        (
            Free(extra=[1, 2, 3]),
            "extra: an Any field reads back as text .* not as a value of type list",
        ),
        (Free(extra=1), "extra: an Any field reads back as text .* not as a value of type int"),
        (Free(extra={"k": 1}), "extra.k: an Any field reads back as text"),
        (Free(extra={}), "extra: an Any field .* not as an empty mapping"),
    ],
    ids=repr,
)
def test_what_would_read_back_different_is_refused(value: BaseModel, cause: str) -> None:
    with pytest.raises(EncodeError, match=cause) as info:
        XmlCodec(type(value)).encode(value)
    assert info.value.type_name == type(value).__name__


def test_none_in_a_list_or_a_mapping_is_refused() -> None:
    with pytest.raises(EncodeError, match=r"\[1\]: XML has no None in a list"):
        XmlCodec(list[int | None], root="l").encode([1, None])
    with pytest.raises(EncodeError, match="a: XML writes None as nothing: the key would be lost"):
        XmlCodec(dict[str, int | None], root="m").encode({"a": None})


def test_repeated_elements_of_a_union_field_are_all_kept() -> None:
    assert XmlCodec(Either).decode(b"<Either><v>1</v><v>2</v></Either>") == Either(v=[1, 2])


class Note(BaseModel):
    id: int
    note: str | None  # required, nullable
    tags: list[str] | None  # required, nullable


class Defaults(BaseModel):
    s: str | None = "x"
    tags: list[str] = ["x"]


@pytest.mark.parametrize(
    "value",
    [
        Note(id=1, note=None, tags=None),
        Note(id=1, note="", tags=["a"]),
        Defaults(s=None, tags=[]),
        Defaults(),
    ],
    ids=repr,
)
def test_none_and_empty_lists_round_trip_as_go_zero_values(value: BaseModel) -> None:
    codec: XmlCodec[Any] = XmlCodec(type(value))
    assert codec.decode(codec.encode(value)) == value


def test_an_empty_list_where_none_is_allowed_is_refused() -> None:
    with pytest.raises(EncodeError, match="tags: XML writes an empty list as nothing"):
        XmlCodec(Note).encode(Note(id=1, note=None, tags=[]))


class Account(BaseModel):
    status: Status
    level: Literal[1, 2]
    ratio: Ratio
    mixed: Literal["1", 1, "a"]
    statuses: list[Status]


def test_enums_and_literals_of_numbers_round_trip() -> None:
    value = Account(
        status=Status.CLOSED,
        level=2,
        ratio=Ratio.HALF,
        mixed="1",
        statuses=[Status.ACTIVE, Status.CLOSED],
    )
    data = XmlCodec(Account).encode(value)
    assert data.startswith(b"<Account><status>2</status><level>2</level><ratio>0.5</ratio>")
    assert XmlCodec(Account).decode(data) == value
    assert (
        XmlCodec(Account).decode(data.replace(b"<mixed>1</mixed>", b"<mixed>a</mixed>")).mixed
        == "a"
    )


class Keyed(BaseModel):
    m: dict[str, int]


@pytest.mark.parametrize(
    "key",
    ["\u00d7", "a\u00f7b", "a\u2028b", "\u0301x", "a\ufeffb", "\ufdd0", "a\u037eb", "1a", "a:b"],
)
def test_names_go_and_expat_would_not_read_are_refused(key: str) -> None:
    with pytest.raises(EncodeError, match="is not an XML element name"):
        XmlCodec(Keyed).encode(Keyed(m={key: 1}))
    with pytest.raises(TypeError, match="not an XML element name"):
        XmlCodec(Keyed, root=key)


@pytest.mark.parametrize("key", ["\u00c4rger", "\u65e5\u672c", "a-b.c_d", "x\u0301", "\u03a9"])
def test_names_go_and_expat_read_are_written(key: str) -> None:
    assert XmlCodec(Keyed).decode(XmlCodec(Keyed).encode(Keyed(m={key: 1}))) == Keyed(m={key: 1})


class Flags(BaseModel):
    ok: bool
    n: int
    x: float
    s: str


def test_space_around_booleans_and_numbers_is_trimmed_as_go_does() -> None:
    data = b"<Flags><ok>\n  true \t</ok><n> 7 </n><x> 1.5\n</x><s> kept </s></Flags>"
    assert XmlCodec(Flags).decode(data) == Flags(ok=True, n=7, x=1.5, s=" kept ")


def test_text_is_escaped_as_go_escapes_it() -> None:
    # Go: xml.Marshal(struct{Name string `xml:"name"`}{"a\"b'c\td\ne\rf<&>"})
    data = XmlCodec(Data).encode(Data(name="a\"b'c\td\ne\rf<&>]]>"))
    assert data == (b"<Data><name>a&#34;b&#39;c&#x9;d&#xA;e&#xD;f&lt;&amp;&gt;]]&gt;</name></Data>")
    assert XmlCodec(Data).decode(data) == Data(name="a\"b'c\td\ne\rf<&>]]>")


class IntOrStr(BaseModel):
    u: int | str = 0


class BoolOrInt(BaseModel):
    u: bool | int = False


class FloatOrInt(BaseModel):
    u: float | int = 0


class IntOrFloat(BaseModel):
    u: int | float = 0


class StrOrInt(BaseModel):
    u: str | int = ""


class OneOrInt(BaseModel):
    u: Literal["1"] | int = 0


class ListOfUnions(BaseModel):
    u: list[bool | int] = []


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        (IntOrStr(u=1), r"u: text cannot tell int from str in int \| str"),
        (BoolOrInt(u=1), r"u: text cannot tell int from bool in bool \| int"),
        (BoolOrInt(u=0), r"u: text cannot tell int from bool in bool \| int"),
        (FloatOrInt(u=1), r"u: text cannot tell int from float in float \| int"),
        (IntOrFloat(u=1.0), r"u: text cannot tell float from int in int \| float"),
        (StrOrInt(u=1), r"u: text cannot tell int from str in str \| int"),
        (OneOrInt(u=1), r"u: text cannot tell int from str in Literal\['1'\] \| int"),
        (ListOfUnions(u=[True, 1]), r"u\[1\]: text cannot tell int from bool"),
    ],
    ids=repr,
)
def test_a_union_of_leaves_text_cannot_tell_apart_is_refused(value: BaseModel, cause: str) -> None:
    with pytest.raises(EncodeError, match=cause):
        XmlCodec(type(value)).encode(value)


@pytest.mark.parametrize(
    "value",
    [
        IntOrStr(u="1"),
        IntOrStr(u="x"),
        BoolOrInt(u=True),
        BoolOrInt(u=2),
        FloatOrInt(u=1.5),
        IntOrFloat(u=2),
        StrOrInt(u="1"),
        OneOrInt(u="1"),
        OneOrInt(u=2),
        ListOfUnions(u=[True, 2]),
    ],
    ids=repr,
)
def test_a_union_of_leaves_text_tells_apart_round_trips(value: BaseModel) -> None:
    codec: XmlCodec[Any] = XmlCodec(type(value))
    back = codec.decode(codec.encode(value))
    assert back == value
    assert repr(back) == repr(value)


class Inner(BaseModel):
    tags: list[str] = []
    n: int = 0


class Pair(BaseModel):
    t: tuple[Inner, int]


class Pairs(BaseModel):
    ts: list[tuple[Inner, list[int]]]
    by: dict[str, tuple[int, Inner]] = {}


@pytest.mark.parametrize(
    "value",
    [
        Pair(t=(Inner(tags=["a"]), 1)),
        Pair(t=(Inner(tags=["a", "b"], n=2), 1)),
        Pair(t=(Inner(), 1)),
        Pairs(ts=[(Inner(tags=["x"]), [1]), (Inner(), [])], by={"k": (3, Inner(tags=["y"]))}),
    ],
    ids=repr,
)
def test_tuples_read_each_item_by_its_type(value: BaseModel) -> None:
    codec: XmlCodec[Any] = XmlCodec(type(value))
    assert codec.decode(codec.encode(value)) == value


def test_a_tuple_payload_reads_each_item_by_its_type() -> None:
    codec: XmlCodec[tuple[Inner, int]] = XmlCodec(tuple[Inner, int], root="pair")
    value = (Inner(tags=["a"]), 1)
    assert codec.decode(codec.encode(value)) == value


class InnerOrInt(BaseModel):
    u: Inner | int


class Outer(BaseModel):
    inners: list[Inner]


class OuterOrInt(BaseModel):
    u: Outer | int


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        (InnerOrInt(u=Inner(tags=["a"])), r"u\.tags: in a union of shapes XML reads a list of 1"),
        (
            InnerOrInt(u=Inner(tags=["a"], n=2)),
            r"u\.tags: in a union of shapes XML reads a list of 1 back as its value",
        ),
        (
            OuterOrInt(u=Outer(inners=[Inner(tags=["a", "b"]), Inner(tags=["c"])])),
            r"u\.inners\.tags: in a union of shapes XML reads a list of 1",
        ),
    ],
    ids=repr,
)
def test_a_union_of_shapes_refuses_what_it_would_read_back_different(
    value: BaseModel, cause: str
) -> None:
    with pytest.raises(EncodeError, match=cause):
        XmlCodec(type(value)).encode(value)


@pytest.mark.parametrize(
    "value",
    [
        InnerOrInt(u=Inner(tags=["a", "b"], n=1)),
        InnerOrInt(u=Inner()),
        InnerOrInt(u=5),
        OuterOrInt(u=Outer(inners=[Inner(tags=["a", "b"]), Inner(n=2)])),
    ],
    ids=repr,
)
def test_a_union_of_shapes_round_trips_what_it_can_tell_apart(value: BaseModel) -> None:
    codec: XmlCodec[Any] = XmlCodec(type(value))
    assert codec.decode(codec.encode(value)) == value
