"""Subject templates: the checks at construction, format, parse and their round trip."""

from __future__ import annotations

import copy
import enum
import functools
import pickle
import typing
import uuid
from typing import Annotated, Any, Literal

import pydantic
import pytest
import typing_extensions

from goflux import (
    MAX_SUBJECT_BYTES,
    InvalidSubject,
    Message,
    NonRetryable,
    SubjectError,
    SubjectMismatch,
    SubjectTemplate,
    is_non_retryable,
)
from goflux._subject_template import destination_template, template_of
from goflux._subjects import validate_pattern, validate_subject


class OrderKey(pydantic.BaseModel):
    region: str
    order_id: str


class Region(enum.Enum):
    EU = "eu"
    US = "us"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Line(pydantic.BaseModel):
    region: Region
    priority: Priority
    n: int
    kind: Literal["a", "b"]
    size: Literal[1, 2, 3]
    id: uuid.UUID
    code: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z]{3}$")]


class LineDict(typing_extensions.TypedDict):
    region: Region
    priority: Priority
    n: int
    kind: Literal["a", "b"]
    size: Literal[1, 2, 3]
    id: uuid.UUID
    code: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z]{3}$")]


class PlainDict(typing.TypedDict):  # typing's, which pydantic refuses on 3.11: still works
    region: str
    order_id: str


TEMPLATE = "orders.{region}.{order_id}.created"
ORDERS = SubjectTemplate(TEMPLATE, OrderKey)
LINE_TEMPLATE = "lines.{region}.{priority}.{n}.{kind}.{size}.{id}.{code}"
LINE_VALUES: dict[str, Any] = {
    "region": Region.EU,
    "priority": Priority.HIGH,
    "n": -42,
    "kind": "b",
    "size": 3,
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "code": "ABC",
}


def test_format_pattern_and_parse() -> None:
    assert ORDERS.template == TEMPLATE
    assert ORDERS.params is OrderKey
    assert ORDERS.names == ("region", "order_id")
    assert ORDERS.pattern == "orders.*.*.created"
    assert validate_pattern(ORDERS.pattern) == "orders.*.*.created"
    subject = ORDERS.format(region="eu", order_id="o-1")
    assert subject == "orders.eu.o-1.created"
    assert type(subject) is str
    assert validate_subject(subject) == subject
    assert ORDERS.parse(subject) == OrderKey(region="eu", order_id="o-1")
    assert ORDERS.format(OrderKey(region="eu", order_id="o-1")) == subject
    assert ORDERS.format({"region": "eu", "order_id": "o-1"}) == subject
    assert ORDERS.matches(subject)
    assert not ORDERS.matches("orders.eu.created")


@pytest.mark.parametrize("params", [Line, LineDict], ids=["pydantic", "TypedDict"])
def test_every_token_type_round_trips(params: type[Any]) -> None:
    template = SubjectTemplate(LINE_TEMPLATE, params)
    subject = template.format(**LINE_VALUES)
    assert subject == "lines.eu.2.-42.b.3.12345678-1234-5678-1234-567812345678.ABC"
    parsed = template.parse(subject)
    if params is Line:
        assert parsed == Line(**LINE_VALUES)
        assert template.format(parsed) == subject
    else:
        assert parsed == LINE_VALUES
        assert type(parsed) is dict
        assert template.format(parsed) == subject
    assert template.pattern == "lines.*.*.*.*.*.*.*"


ROUND_TRIPS = [
    {"region": "eu", "order_id": "o-1"},
    {"region": "EU-west_1", "order_id": "0"},
    {"region": "ünïcödé", "order_id": "42"},
    {"region": "a-b:c/d", "order_id": "{x}"},
    {"region": "x" * 100, "order_id": "#$%&'()+,-/:;<=?@[]^_`{|}~"},
]


@pytest.mark.parametrize("values", ROUND_TRIPS)
@pytest.mark.parametrize("params", [OrderKey, PlainDict], ids=["pydantic", "TypedDict"])
def test_parse_of_format_gives_the_parameters_back(
    values: dict[str, str], params: type[Any]
) -> None:
    template = SubjectTemplate(TEMPLATE, params)
    parsed = template.parse(template.format(**values))
    expected = OrderKey(**values) if params is OrderKey else values
    assert parsed == expected


REFUSED_TOKENS = [
    ("", "must not be empty"),
    ("a.b", "must not contain '.'"),
    (".", "must not contain '.'"),
    ("*", "must not contain a wildcard"),
    ("o*1", "must not contain a wildcard"),
    (">", "must not contain a wildcard"),
    ("a b", "must not contain whitespace"),
    ("\t", "must not contain whitespace"),
    ("a\u2003b", "must not contain whitespace"),
    ("a\x00", "must not contain a control character"),
]


@pytest.mark.parametrize(("token", "rule"), REFUSED_TOKENS)
@pytest.mark.parametrize("params", [OrderKey, PlainDict], ids=["pydantic", "TypedDict"])
def test_format_refuses_what_is_not_one_token(token: str, rule: str, params: type[Any]) -> None:
    template = SubjectTemplate(TEMPLATE, params)
    with pytest.raises(SubjectError) as caught:
        template.format(region="eu", order_id=token)
    error = caught.value
    assert isinstance(error, InvalidSubject)
    assert not isinstance(error, SubjectMismatch)
    assert error.part == "parameter 'order_id'"
    assert error.rule.startswith(rule)
    assert error.segment == token
    assert "parameter 'order_id'" in str(error)
    assert TEMPLATE in str(error)


@pytest.mark.parametrize(
    "subject",
    [
        "orders.eu.created",  # a token short
        "orders.eu.o-1.x.created",  # a token long
        "orders.eu.o-1.deleted",  # another literal
        "payments.eu.o-1.created",
        "orders.*.o-1.created",  # a pattern, not a subject
        "orders.eu.>",
        "orders.eu..created",  # an empty token
        "orders.eu.a b.created",  # whitespace
        "orders.eu.a\x00.created",  # a control character
        "",
    ],
)
def test_parse_refuses_a_subject_that_does_not_fit(subject: str) -> None:
    with pytest.raises(SubjectMismatch) as caught:
        ORDERS.parse(subject)
    error = caught.value
    assert isinstance(error, SubjectError)
    assert error.template == TEMPLATE
    assert error.subject == subject
    assert error.rule == "does not fit the template"
    assert repr(subject) in str(error)
    assert TEMPLATE in str(error)


def test_parse_refuses_values_that_do_not_validate_with_the_pydantic_error_chained() -> None:
    template = SubjectTemplate(LINE_TEMPLATE, Line)
    good = template.format(**LINE_VALUES)
    for bad, name in [
        (good.replace(".-42.", ".minus.", 1), "n"),
        (good.replace(".eu.", ".mars.", 1), "region"),
        (good.replace(".ABC", ".abc"), "code"),
        (good.replace(".2.", ".7.", 1), "priority"),
        (good.replace(".b.", ".c.", 1), "kind"),
        (good.replace("12345678-1234", "not-a-uuid"), "id"),
    ]:
        with pytest.raises(SubjectMismatch) as caught:
            template.parse(bad)
        error = caught.value
        assert error.part == f"parameter {name!r}", bad
        assert error.rule == "does not validate as the parameter type"
        assert isinstance(error.__cause__, pydantic.ValidationError)
        assert LINE_TEMPLATE in str(error)


def test_format_validates_as_the_parameter_type() -> None:
    template = SubjectTemplate(LINE_TEMPLATE, Line)
    with pytest.raises(SubjectError, match="parameter 'code'") as caught:
        template.format(**{**LINE_VALUES, "code": "abc"})
    assert isinstance(caught.value.__cause__, pydantic.ValidationError)
    with pytest.raises(SubjectError, match="parameter 'n'"):
        template.format(**{**LINE_VALUES, "n": "many"})
    with pytest.raises(SubjectError, match="parameter 'order_id'"):
        ORDERS.format(region="eu")  # missing
    with pytest.raises(SubjectError, match="parameter 'typo': is not a placeholder"):
        ORDERS.format(region="eu", order_id="o-1", typo="x")
    with pytest.raises(TypeError, match="not both"):
        ORDERS.format(OrderKey(region="eu", order_id="o"), region="us")
    with pytest.raises(TypeError, match="OrderKey or a mapping"):
        ORDERS.format(42)  # type: ignore[arg-type]


def test_a_model_instance_is_rendered_as_it_is_and_still_checked_as_tokens() -> None:
    unchecked = OrderKey.model_construct(region="e.u", order_id="o-1")
    with pytest.raises(SubjectError, match="parameter 'region'"):
        ORDERS.format(unchecked)


class Floaty(pydantic.BaseModel):
    x: float


class Flag(pydantic.BaseModel):
    x: bool


class Maybe(pydantic.BaseModel):
    x: str | None


class Either(pydantic.BaseModel):
    x: int | str


class Mixed(pydantic.BaseModel):
    x: Literal["a", 1]


class DottedLiteral(pydantic.BaseModel):
    x: Literal["a.b"]


class Dotted(enum.Enum):
    A = "a.b"


class DottedEnum(pydantic.BaseModel):
    x: Dotted


class Aliased(pydantic.BaseModel):
    x: str = pydantic.Field(alias="y")


class Partial(typing_extensions.TypedDict, total=False):
    x: str


class Listed(pydantic.BaseModel):
    x: list[str]


@pytest.mark.parametrize(
    ("template", "params", "part", "rule"),
    [
        ("a.{x}", Floaty, "parameter 'x'", "its type <class 'float'> is not one subject token"),
        ("a.{x}", Flag, "parameter 'x'", "its type <class 'bool'> is not one subject token"),
        ("a.{x}", Maybe, "parameter 'x'", "its type str | None is not one subject token"),
        ("a.{x}", Either, "parameter 'x'", "its type int | str is not one subject token"),
        ("a.{x}", Mixed, "parameter 'x'", "its type typing.Literal['a', 1] is not one"),
        ("a.{x}", Listed, "parameter 'x'", "its type list[str] is not one subject token"),
        ("a.{x}", DottedLiteral, "parameter 'x' value 'a.b'", "must not contain '.'"),
        ("a.{x}", DottedEnum, "parameter 'x' value 'a.b'", "must not contain '.'"),
        ("a.{x}", Aliased, "parameter 'x'", "has an alias"),
        ("a.{x}", Partial, "parameter 'x'", "must be a required key"),
        ("a.{x}", dict, "parameters", "must be a pydantic model or a TypedDict"),
        ("a.{region}", OrderKey, "placeholders", "no placeholder for 'order_id'"),
        ("a.{region}.{order_id}.{z}", OrderKey, "placeholders", "no field for 'z'"),
        ("a.{region}.{region}.{order_id}", OrderKey, "placeholder {region}", "appears twice"),
        ("a.x{region}.{order_id}", OrderKey, "token 2", "a placeholder must be a whole token"),
        ("a.{region}.{order_id", OrderKey, "token 3", "a placeholder must be a whole token"),
        ("a.{1x}.{region}.{order_id}", OrderKey, "token 2", "a placeholder must be a whole"),
        ("a.*.{region}.{order_id}", OrderKey, "token 2", "must not contain a wildcard"),
        ("a.{region}.{order_id}.>", OrderKey, "token 4", "must not contain a wildcard"),
        ("a..{region}.{order_id}", OrderKey, "token 2", "must not be empty"),
        ("a b.{region}.{order_id}", OrderKey, "token 1", "must not contain whitespace"),
        ("{region}.{order_id}." + "x" * MAX_SUBJECT_BYTES, OrderKey, "template", "makes the"),
    ],
)
def test_construction_refuses_what_cannot_round_trip(
    template: str, params: type[Any], part: str, rule: str
) -> None:
    with pytest.raises(SubjectError) as caught:
        SubjectTemplate(template, params)
    error = caught.value
    assert error.part == part
    assert error.rule.startswith(rule) or error.rule.endswith(rule), error.rule
    assert part in str(error)


def test_a_template_is_immutable_comparable_and_pickles() -> None:
    with pytest.raises(AttributeError, match="immutable"):
        ORDERS._template = "x"
    with pytest.raises(AttributeError, match="immutable"):
        ORDERS.pattern.subject_template = None  # type: ignore[attr-defined]
    again = pickle.loads(pickle.dumps(ORDERS))
    assert again == ORDERS
    assert hash(again) == hash(ORDERS)
    assert again.parse("orders.eu.o-1.created") == OrderKey(region="eu", order_id="o-1")
    pattern = pickle.loads(pickle.dumps(ORDERS.pattern))
    assert pattern == "orders.*.*.created"
    assert template_of(pattern) == ORDERS
    assert template_of(copy.copy(ORDERS.pattern)) == ORDERS
    assert repr(ORDERS) == f"SubjectTemplate({TEMPLATE!r}, OrderKey)"
    assert SubjectTemplate(TEMPLATE, PlainDict) != ORDERS


def test_the_pattern_knows_its_template_a_plain_string_does_not() -> None:
    assert template_of(ORDERS.pattern) is ORDERS
    assert template_of("orders.*.*.created") is None
    assert destination_template(ORDERS.pattern) == TEMPLATE
    assert destination_template("orders.*.*.created") == "orders.*.*.created"
    # validation hands back what it was given, not an equal string it saw first
    assert validate_pattern("orders.*.*.created") == "orders.*.*.created"
    assert template_of(validate_pattern(ORDERS.pattern)) is ORDERS


def test_json_schema_has_a_property_per_placeholder() -> None:
    schema = SubjectTemplate(LINE_TEMPLATE, LineDict).json_schema()
    assert sorted(schema["properties"]) == sorted(LINE_VALUES)
    assert schema["properties"]["code"]["pattern"] == r"^[A-Z]{3}$"


async def test_the_handler_hands_over_validated_parameters() -> None:
    seen: list[tuple[str, OrderKey]] = []

    async def on_created(message: Message[bytes], key: OrderKey) -> None:
        """Record an order's creation."""
        seen.append((message.subject, key))

    handle = ORDERS.handler(on_created)
    assert handle.__doc__ == "Record an order's creation."
    await handle(Message("orders.eu.o-1.created", b""))
    assert seen == [("orders.eu.o-1.created", OrderKey(region="eu", order_id="o-1"))]


@pytest.mark.parametrize("subject", ["orders.eu.o-1.deleted", "orders.eu.created"])
async def test_the_handler_fails_for_good_on_a_subject_that_does_not_fit(subject: str) -> None:
    called = False

    async def on_created(message: Message[bytes], key: OrderKey) -> None:
        nonlocal called
        called = True

    with pytest.raises(NonRetryable, match=repr(subject)) as caught:
        await ORDERS.handler(on_created)(Message(subject, b""))
    assert not called
    assert is_non_retryable(caught.value)
    assert isinstance(caught.value.__cause__, SubjectMismatch)


async def test_the_handler_lets_the_functions_own_errors_through() -> None:
    async def on_created(message: Message[bytes], key: OrderKey) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await ORDERS.handler(on_created)(Message("orders.eu.o-1.created", b""))


class StrictLine(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, frozen=True)
    region: Region
    priority: Priority
    n: int
    kind: Literal["a", "b"]
    size: Literal[1, 2, 3]
    id: uuid.UUID
    code: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z]{3}$")]


class FieldStrictLine(pydantic.BaseModel):
    region: Region = pydantic.Field(strict=True)
    priority: Priority = pydantic.Field(strict=True)
    n: int = pydantic.Field(strict=True)
    kind: Literal["a", "b"]
    size: Literal[1, 2, 3]
    id: uuid.UUID = pydantic.Field(strict=True)
    code: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z]{3}$")]


@pydantic.with_config(pydantic.ConfigDict(strict=True))
class StrictLineDict(typing_extensions.TypedDict):
    region: Region
    priority: Priority
    n: int
    kind: Literal["a", "b"]
    size: Literal[1, 2, 3]
    id: uuid.UUID
    code: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Z]{3}$")]


@pytest.mark.parametrize(
    "params",
    [StrictLine, FieldStrictLine, StrictLineDict],
    ids=["strict model", "strict fields", "strict TypedDict"],
)
def test_a_strict_parameter_type_round_trips(params: type[Any]) -> None:
    # strict validation of Python objects wants an Enum member, a UUID, an int: the
    # tokens of a subject are read as strings are in JSON, which strict mode accepts
    template = SubjectTemplate(LINE_TEMPLATE, params)
    subject = template.format(**LINE_VALUES)
    assert subject == "lines.eu.2.-42.b.3.12345678-1234-5678-1234-567812345678.ABC"
    parsed = template.parse(subject)
    assert parsed == (LINE_VALUES if params is StrictLineDict else params(**LINE_VALUES))
    assert template.format(parsed) == subject
    with pytest.raises(SubjectMismatch, match="parameter 'region'"):
        template.parse(subject.replace(".eu.", ".mars.", 1))


UUID = "1234abcd-12ef-5678-9abc-567812345678"  # hex letters: upper case differs


class NumberedKey(pydantic.BaseModel):
    n: int
    id: uuid.UUID
    priority: Priority
    size: Literal[1, 2, 30]


class NumberedDict(typing_extensions.TypedDict):
    n: int
    id: uuid.UUID
    priority: Priority
    size: Literal[1, 2, 30]


NUMBERED = "orders.{n}.{id}.{priority}.{size}"
# (n, id, priority, size) tokens: some read back as written, the others must be refused
NUMBERED_TOKENS = [
    *[(n, UUID, "1", "30") for n in ("0", "7", "-7", "10", "-100", str(2**70), str(-(2**70)))],
    *[(n, UUID, "1", "30") for n in ("007", "00", "-0", "+7", "7_0", "-07", "٣", "1e3")],
    *[(n, UUID, "1", "30") for n in ("0x1f", "7e0", "-", "--7")],
    *[
        ("7", u, "1", "30")
        for u in (
            UUID.upper(),
            UUID.replace("-", ""),
            "{" + UUID + "}",
            "urn:uuid:" + UUID,
            UUID[:8] + UUID[9:],
            "12345678-1234-5678-1234-56781234567",
        )
    ],
    *[("7", UUID, p, "30") for p in ("2", "01", "+1", "-0", "1_0")],
    *[("7", UUID, "1", s) for s in ("2", "030", "+30", "3_0", "3e1")],
]


@pytest.mark.parametrize("tokens", NUMBERED_TOKENS, ids=".".join)
@pytest.mark.parametrize("params", [NumberedKey, NumberedDict], ids=["pydantic", "TypedDict"])
def test_what_parses_formats_back_to_the_same_subject(
    tokens: tuple[str, str, str, str], params: type[Any]
) -> None:
    template = SubjectTemplate(NUMBERED, params)
    subject = "orders." + ".".join(tokens)
    refused: SubjectMismatch | None = None
    try:
        parsed = template.parse(subject)
    except SubjectMismatch as error:
        refused = error
    else:
        assert template.format(parsed) == subject
        return
    assert refused.subject == subject
    assert refused.part is not None
    assert refused.part.startswith("parameter '"), refused.part
    name = refused.part.removeprefix("parameter '").removesuffix("'")
    assert refused.segment == tokens[template.names.index(name)]


def test_the_canonical_spellings_parse_and_the_others_name_their_parameter() -> None:
    template = SubjectTemplate(NUMBERED, NumberedKey)
    good = f"orders.-7.{UUID}.1.30"
    assert template.parse(good) == NumberedKey(n=-7, id=uuid.UUID(UUID), priority=1, size=30)
    for bad, name in [
        (f"orders.007.{UUID}.1.30", "n"),
        (f"orders.-0.{UUID}.1.30", "n"),
        (f"orders.+7.{UUID}.1.30", "n"),
        (f"orders.7_0.{UUID}.1.30", "n"),
        (f"orders.7.{UUID.upper()}.1.30", "id"),
        (f"orders.7.{UUID.replace('-', '')}.1.30", "id"),
        (f"orders.7.urn:uuid:{UUID}.1.30", "id"),
        (f"orders.7.{UUID}.01.30", "priority"),
        (f"orders.7.{UUID}.1.+30", "size"),
    ]:
        with pytest.raises(SubjectMismatch) as caught:
            template.parse(bad)
        assert caught.value.part == f"parameter {name!r}", bad
        assert f"parameter {name!r}" in str(caught.value)


@pydantic.with_config(pydantic.ConfigDict(str_to_lower=True))
class Lowered(typing_extensions.TypedDict):
    a: str


def test_a_value_the_type_changes_on_reading_is_refused_not_read_otherwise() -> None:
    template = SubjectTemplate("a.{a}", Lowered)
    assert template.format(a="AB") == "a.ab"  # the TypedDict's pydantic config applies
    assert template.parse("a.ab") == {"a": "ab"}
    with pytest.raises(SubjectMismatch, match="parameter 'a'") as caught:
        template.parse("a.AB")
    assert caught.value.segment == "AB"


class Shadowing(typing_extensions.TypedDict):
    json: str
    copy: str
    model_config: str
    model_fields: str
    _x: str


class PlainShadowing(typing.TypedDict):
    json: str
    model_config: str
    _x: str


@pydantic.with_config(pydantic.ConfigDict(str_to_lower=True))
class PlainLowered(typing.TypedDict):  # typing's: pydantic refuses it on 3.11
    a: str


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("params", [Shadowing, PlainShadowing], ids=["typing_extensions", "typing"])
def test_a_typed_dict_key_may_be_any_identifier(params: type[Any]) -> None:
    names = list(typing.get_type_hints(params))
    template = SubjectTemplate(".".join("{" + name + "}" for name in names), params)
    values = {name: f"v{i}" for i, name in enumerate(names)}
    subject = template.format(**values)
    assert subject == ".".join(values.values())
    assert template.parse(subject) == values
    assert sorted(template.json_schema()["properties"]) == sorted(names)


def test_a_typing_typed_dict_keeps_its_pydantic_config() -> None:
    template = SubjectTemplate("a.{a}", PlainLowered)
    assert template.format(a="AB") == "a.ab"
    assert template.parse("a.ab") == {"a": "ab"}


class Pair(pydantic.BaseModel):
    a: str
    b: str


class Count(pydantic.BaseModel):
    n: int


def test_format_raises_only_subject_errors() -> None:
    pair = SubjectTemplate("x.{a}.{b}", Pair)
    with pytest.raises(SubjectError, match="parameter 'b'") as caught:
        pair.format(Pair.model_construct(a="1"))  # type: ignore[call-arg]
    assert caught.value.part == "parameter 'b'"
    count = SubjectTemplate("x.{n}", Count)
    for n in (10**5000, -(10**5000)):  # more digits than Python turns into a str
        with pytest.raises(SubjectError, match="parameter 'n'") as caught:
            count.format(n=n)
        assert caught.value.part == "parameter 'n'"
        with pytest.raises(SubjectError, match="parameter 'n'"):
            count.format(Count.model_construct(n=n))
    with pytest.raises(SubjectError, match="makes the subject"):
        count.format(n=10**MAX_SUBJECT_BYTES)
    assert count.format(n=10**3000) == "x.1" + "0" * 3000  # long, and still a subject


async def test_the_handler_takes_a_plain_function_as_pipes_do() -> None:
    seen: list[OrderKey] = []

    def on_created(message: Message[bytes], key: OrderKey) -> None:
        seen.append(key)

    class Callback:
        async def __call__(self, message: Message[bytes], key: OrderKey) -> None:
            seen.append(key)

    for fn in (on_created, Callback(), functools.partial(on_created)):
        await ORDERS.handler(fn)(Message("orders.eu.o-1.created", b""))
    assert seen == [OrderKey(region="eu", order_id="o-1")] * 3
    with pytest.raises(TypeError, match="callable"):
        ORDERS.handler("on_created")  # type: ignore[arg-type]
