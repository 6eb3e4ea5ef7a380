from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import TypedDict

from goflux import BytesCodec, DecodeError, EncodeError, JsonCodec, StrCodec
from tests.models import Customer, Order


@dataclass
class Point:
    x: float
    y: float


class Event(TypedDict):
    name: str
    count: int


class Basket(BaseModel):
    prices: list[float]


def test_model_encodes_compact_with_aliases_like_go() -> None:
    codec = JsonCodec(Order)
    data = codec.encode(Order(id="o-1", customerId="c-1", amount=12.5, lines=["a"]))
    # What Go's encoding/json writes for the equivalent struct with json tags.
    assert data == b'{"id":"o-1","customerId":"c-1","amount":12.5,"lines":["a"],"created":null}'
    assert codec.decode(data) == Order(id="o-1", customerId="c-1", amount=12.5, lines=["a"])


def test_decodes_what_a_go_service_writes() -> None:
    # encoding/json output: RFC 3339 time with offset, fields in struct order, no spaces.
    go = b'{"id":"o-9","customerId":"c-2","amount":3,"created":"2026-11-22T10:00:00.5+01:00"}'
    order = JsonCodec(Order).decode(go)
    assert order.amount == 3.0
    assert order.created == datetime(2026, 11, 22, 9, 0, 0, 500000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tp", "value"),
    [
        (Point, Point(1.0, 2.5)),
        (Event, {"name": "signup", "count": 3}),
        (list[int], [1, 2, 3]),
        (dict[str, float], {"a": 1.5}),
        (int | None, None),
        (str, "héllo"),
        (float, 1),
    ],
)
def test_round_trips(tp: Any, value: Any) -> None:
    codec = JsonCodec(tp)
    data = codec.encode(value)
    assert b" " not in data.replace(b"h\xc3\xa9llo", b"")
    assert codec.decode(data) == value
    json.loads(data)  # standard JSON, as any peer parses it


@pytest.mark.parametrize(
    ("tp", "value", "fragment"),
    [
        (
            Order,
            Customer(id="c", name="n"),
            "cannot encode Customer as Order: expected an instance",
        ),
        (Order, {"id": "o"}, "cannot encode dict as Order"),
        (Point, (1, 2), "cannot encode tuple as Point"),
        (Event, {"name": "x"}, "count: Field required"),
        (Event, {"name": "x", "count": "3"}, "count"),
        (list[int], ["a"], "cannot encode list as list[int]"),
        (int, "x", "cannot encode str as int"),
        (float, math.nan, "NaN and Infinity are not valid JSON"),
        (Basket, Basket(prices=[1.0, math.inf]), "NaN and Infinity"),
        (Point, Point(-math.inf, 0), "NaN and Infinity"),
    ],
)
def test_encode_errors_name_the_type_and_the_cause(tp: Any, value: Any, fragment: str) -> None:
    with pytest.raises(EncodeError, match=fragment.replace("[", r"\[").replace("]", r"\]")) as info:
        JsonCodec(tp).encode(value)
    assert info.value.type_name


def test_nulls_that_are_real_nulls_still_encode() -> None:
    codec = JsonCodec(dict[str, float | None])
    assert codec.encode({"a": None, "b": 1.0}) == b'{"a":null,"b":1.0}'
    assert JsonCodec(str).encode("null NaN Infinity") == b'"null NaN Infinity"'


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "Invalid JSON"),
        (b"\xff\xfe", "Invalid JSON"),
        (b'{"id":"o-1","customerId":"c"', "Invalid JSON"),
        (
            b'{"id":"o-1","customerId":"c","amount":"lots"}',
            "amount: Input should be a valid number",
        ),
        (b'{"id":"o-1"}', "customerId: Field required"),
        (b"[]", "<root>: Input should be an object"),
    ],
)
def test_decode_errors_name_the_type_size_and_cause(data: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError, match=fragment) as info:
        JsonCodec(Order).decode(data)
    err = info.value
    assert err.type_name == "Order"
    assert err.size == len(data)
    assert f"cannot decode {len(data)} bytes as Order" in str(err)
    assert err.__cause__ is not None


@pytest.mark.parametrize(
    ("tp", "data"),
    [
        (Order, b'{"id":"o","customerId":"c","amount":NaN}'),
        (Order, b'{"id":"o","customerId":"c","amount":-Infinity}'),
        (dict[str, Any], b'{"a": NaN}'),
        (list[float], b"[Infinity]"),
    ],
)
def test_non_json_nan_and_infinity_tokens_are_refused(tp: Any, data: bytes) -> None:
    with pytest.raises(DecodeError, match=r"NaN and Infinity are not valid JSON|finite number"):
        JsonCodec(tp).decode(data)


@pytest.mark.parametrize(
    ("tp", "data"),
    [
        (float, b'"-infinity"'),  # lax str -> float
        (float, b"1e999"),  # overflows a double
        (list[float], b"[1.5, 2e400]"),
    ],
)
def test_plain_types_refuse_json_that_would_become_non_finite(tp: Any, data: bytes) -> None:
    with pytest.raises(DecodeError, match="finite number"):
        JsonCodec(tp).decode(data)


class FiniteOnly(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)
    x: float


def test_models_decide_about_non_finite_floats_with_their_own_config() -> None:
    lax = JsonCodec(Order).decode(b'{"id":"o","customerId":"c","amount":"nan"}')
    assert math.isnan(lax.amount)  # pydantic's default for models; re-encoding refuses it
    with pytest.raises(EncodeError, match="NaN"):
        JsonCodec(Order).encode(lax)
    for data in (b'{"x":"nan"}', b'{"x":1e999}'):
        with pytest.raises(DecodeError, match="finite number"):
            JsonCodec(FiniteOnly).decode(data)


def test_text_that_mentions_nan_or_infinity_decodes_fine() -> None:
    assert JsonCodec(str).decode(b'"NaN or Infinity"') == "NaN or Infinity"
    order = JsonCodec(Order).decode(b'{"id":"NaN","customerId":"Infinity","amount":1e5}')
    assert (order.id, order.customer_id, order.amount) == ("NaN", "Infinity", 1e5)


class NanConstants(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")
    x: float


class NanStrings(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")
    x: float


@pytest.mark.parametrize(
    ("tp", "value"),
    [
        (set[float], {math.nan}),
        (frozenset[float], frozenset({math.inf})),
        (dict[str, Any], {"a": {math.nan}}),
        (NanConstants, NanConstants(x=math.nan)),
        (NanStrings, NanStrings(x=math.inf)),
    ],
)
def test_non_finite_values_are_refused_however_they_would_serialise(tp: Any, value: Any) -> None:
    with pytest.raises(EncodeError, match=r"NaN and Infinity|finite number"):
        JsonCodec(tp).encode(value)


@pytest.mark.parametrize("tp", [int, float])
def test_bool_is_not_a_number_on_the_wire(tp: Any) -> None:
    with pytest.raises(EncodeError, match="cannot encode bool"):
        JsonCodec(tp).encode(True)
    assert JsonCodec(bool).encode(True) == b"true"


@pytest.mark.parametrize("data", [None, 42, ["x"]])
def test_decoding_something_that_is_not_bytes_is_a_decode_error(data: Any) -> None:
    with pytest.raises(DecodeError, match=f"cannot decode {type(data).__name__} as Order"):
        JsonCodec(Order).decode(data)


def test_strict_mode_refuses_coercion() -> None:
    assert JsonCodec(int).decode(b'"5"') == 5
    with pytest.raises(DecodeError) as info:
        JsonCodec(int, strict=True).decode(b'"5"')
    assert isinstance(info.value.__cause__, ValidationError)


def test_many_errors_are_summarised() -> None:
    with pytest.raises(DecodeError, match="and 3 more"):
        JsonCodec(list[int]).decode(b'["a","b","c","d","e","f","g","h"]')


def test_unsupported_types_fail_at_construction() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="JsonCodec cannot handle Opaque"):
        JsonCodec(Opaque)


@given(st.binary(max_size=256))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    codec = JsonCodec(Order)
    try:
        result = codec.decode(data)
    except DecodeError:
        return
    assert isinstance(result, Order)


@given(
    st.builds(
        Order,
        id=st.text(max_size=20),
        customerId=st.text(max_size=20),
        amount=st.floats(allow_nan=False, allow_infinity=False),
        lines=st.lists(st.text(max_size=5), max_size=4),
    )
)
def test_any_valid_order_round_trips(order: Order) -> None:
    codec = JsonCodec(Order)
    assert codec.decode(codec.encode(order)) == order


def test_bytes_codec() -> None:
    codec = BytesCodec()
    assert codec.encode(b"\x00\xff") == b"\x00\xff"
    assert codec.encode(bytearray(b"ab")) == b"ab"
    assert codec.encode(memoryview(b"cd")) == b"cd"
    assert codec.decode(b"x") == b"x"
    with pytest.raises(EncodeError, match="cannot encode str as bytes"):
        codec.encode("text")  # type: ignore[arg-type]


def test_str_codec() -> None:
    codec = StrCodec()
    assert codec.decode(codec.encode("grüße")) == "grüße"
    with pytest.raises(EncodeError, match="expected str"):
        codec.encode(b"x")  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="UTF-8"):
        codec.encode("\ud800")
    with pytest.raises(DecodeError, match="invalid UTF-8 at byte 1") as info:
        codec.decode(b"a\xff")
    assert info.value.size == 2


def test_repr_names_the_type() -> None:
    assert repr(JsonCodec(Order)) == "JsonCodec(Order)"
    assert repr(JsonCodec(list[int])) == "JsonCodec(list[int])"
    assert JsonCodec(Order).type is Order


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int


def test_nan_in_untyped_extra_fields_is_refused() -> None:
    with pytest.raises(EncodeError, match="NaN"):
        JsonCodec(Extra).encode(Extra(id=1, price=math.nan))  # type: ignore[call-arg]


@pytest.mark.parametrize("data", [b'{"id":1}', bytearray(b'{"id":1}'), memoryview(b'{"id":1}')])
def test_bytes_like_input_decodes(data: Any) -> None:
    assert JsonCodec(Extra).decode(data).id == 1


def test_text_is_not_wire_data() -> None:
    with pytest.raises(DecodeError, match="cannot decode str as float: expected bytes"):
        JsonCodec(float).decode("1.5")  # type: ignore[arg-type]


def test_bytes_travel_as_base64_like_go_byte_slices() -> None:
    codec = JsonCodec(dict[str, bytes])
    assert codec.encode({"blob": b"\x00\xff"}) == b'{"blob":"AP8="}'
    assert codec.decode(b'{"blob":"AP8="}') == {"blob": b"\x00\xff"}


class TypedEvent(BaseModel):
    type: str  # a field called "type", as event models often have
    score: float
    kind: dict[str, str] = {}


def test_a_field_called_type_is_just_a_field() -> None:
    codec = JsonCodec(TypedEvent)
    event = TypedEvent(type="order.created", score=1.5, kind={"type": "x"})
    assert codec.decode(codec.encode(event)) == event
    with pytest.raises(EncodeError, match=r"NaN|inf"):
        codec.encode(TypedEvent(type="t", score=float("nan")))
