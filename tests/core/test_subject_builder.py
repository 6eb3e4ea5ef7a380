"""The subject builder: Go goflux's examples give the same strings; every rule refuses."""

from __future__ import annotations

import copy
import enum
import pickle
from collections.abc import Callable

import pytest

from goflux import (
    MAX_SUBJECT_BYTES,
    InvalidSubject,
    SubjectDomain,
    SubjectEntity,
    SubjectError,
    SubjectEvent,
    Subjects,
)
from goflux._subjects import validate_pattern, validate_subject

# Every example of Go goflux's subject/nats (example_test.go, doc.go,
# docs/transports/nats-subjects.md at 76d059f), with the string Go prints.
GO_EXAMPLES: list[tuple[str, Callable[[], str], str]] = [
    # example_test.go
    ("ExampleNew", Subjects, ""),
    ("ExampleNew_multipleSegments", lambda: Subjects("prod", "acme"), "prod.acme"),
    ("ExampleNewDomain", lambda: SubjectDomain("order"), "order"),
    ("ExampleSubject_Domain", lambda: Subjects("prod", "acme").domain("user"), "prod.acme.user"),
    ("ExampleDomain_String", lambda: Subjects("prod", "acme").domain("user"), "prod.acme.user"),
    (
        "ExampleDomain_All",
        lambda: Subjects("prod", "acme").domain("user").all(),
        "prod.acme.user.>",
    ),
    ("ExampleDomain_Entity", lambda: SubjectDomain("user").entity("profile"), "user.profile"),
    ("ExampleEntity_String", lambda: SubjectDomain("user").entity("profile"), "user.profile"),
    ("ExampleEntity_All", lambda: SubjectDomain("order").entity("item").all(), "order.item.>"),
    (
        "ExampleEntity_Event",
        lambda: SubjectDomain("order").entity("item").event("created"),
        "order.item.created",
    ),
    (
        "ExampleEvent_String",
        lambda: Subjects("prod", "acme").domain("user").entity("profile").event("updated"),
        "prod.acme.user.profile.updated",
    ),
    # doc.go
    (
        "doc.go chain",
        lambda: Subjects("prod", "acme").domain("user").entity("profile").event("updated"),
        "prod.acme.user.profile.updated",
    ),
    ("doc.go wildcard", lambda: SubjectDomain("user").all(), "user.>"),
    # docs/transports/nats-subjects.md
    ("docs New with prefix", lambda: Subjects("prod", "acme"), "prod.acme"),
    ("docs New no prefix", Subjects, ""),
    ("docs Domain from a prefix", lambda: Subjects("prod").domain("order"), "prod.order"),
    ("docs NewDomain", lambda: SubjectDomain("order"), "order"),
    ("docs Domain All", lambda: Subjects("prod").domain("order").all(), "prod.order.>"),
    ("docs Entity", lambda: Subjects("prod").domain("order").entity("item"), "prod.order.item"),
    (
        "docs Entity All",
        lambda: Subjects("prod").domain("order").entity("item").all(),
        "prod.order.item.>",
    ),
    (
        "docs Event",
        lambda: Subjects("prod").domain("order").entity("item").event("created"),
        "prod.order.item.created",
    ),
    (
        "docs usage orderItemCreated",
        lambda: Subjects("prod", "acme").domain("order").entity("item").event("created"),
        "prod.acme.order.item.created",
    ),
    (
        "docs usage orderItemUpdated",
        lambda: Subjects("prod", "acme").domain("order").entity("item").event("updated"),
        "prod.acme.order.item.updated",
    ),
    (
        "docs orders.All()",
        lambda: Subjects("prod", "acme").domain("order").all(),
        "prod.acme.order.>",
    ),
    (
        "docs orderItem.All()",
        lambda: Subjects("prod", "acme").domain("order").entity("item").all(),
        "prod.acme.order.item.>",
    ),
]


@pytest.mark.parametrize(
    ("example", "build", "expected"), GO_EXAMPLES, ids=[e[0] for e in GO_EXAMPLES]
)
def test_the_same_strings_as_go(example: str, build: Callable[[], str], expected: str) -> None:
    built = build()
    assert built == expected
    assert str(built) == expected
    assert type(str(built)) is str
    assert f"{built}" == expected


def test_all_on_a_prefix_and_on_no_prefix() -> None:
    assert Subjects("prod", "acme").all() == "prod.acme.>"
    assert Subjects().all() == ">"
    assert validate_pattern(Subjects().all()) == ">"


def test_each_stage_has_its_type() -> None:
    prefix = Subjects("prod")
    domain = prefix.domain("order")
    entity = domain.entity("item")
    event = entity.event("created")
    assert [type(v) for v in (prefix, domain, entity, event)] == [
        Subjects,
        SubjectDomain,
        SubjectEntity,
        SubjectEvent,
    ]
    assert isinstance(event, str)
    assert SubjectEntity(domain, "item") == entity
    assert SubjectEvent(entity, "created") == event
    assert Subjects().domain("order") == SubjectDomain("order")
    with pytest.raises(TypeError, match="SubjectDomain"):
        SubjectEntity("order", "item")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SubjectEntity"):
        SubjectEvent(domain, "created")  # type: ignore[arg-type]


def test_values_are_immutable_and_behave_as_their_string() -> None:
    event = Subjects("prod").domain("order").entity("item").event("created")
    with pytest.raises(AttributeError):
        event.name = "x"  # type: ignore[attr-defined]
    assert not hasattr(event, "__dict__")
    assert hash(event) == hash("prod.order.item.created")
    keyed: dict[str, int] = {event: 1}
    assert keyed["prod.order.item.created"] == 1
    assert event == "prod.order.item.created"
    assert repr(event) == repr("prod.order.item.created")
    assert validate_subject(event) == "prod.order.item.created"


@pytest.mark.parametrize("value", [
    Subjects("prod", "acme"),
    Subjects(),
    SubjectDomain("order"),
    Subjects("prod").domain("order").entity("item"),
    Subjects("prod").domain("order").entity("item").event("created"),
])  # fmt: skip
def test_values_pickle_and_copy_as_themselves(value: str) -> None:
    for again in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
        assert again == value
        assert type(again) is type(value)


def test_unpickling_checks_the_segments_again() -> None:
    forged = pickle.dumps(SubjectDomain("order")).replace(b"order", b"or*er")
    with pytest.raises(SubjectError, match="wildcard"):
        pickle.loads(forged)


def test_the_empty_prefix_is_no_subject() -> None:
    with pytest.raises(InvalidSubject, match="must not be empty"):
        validate_subject(Subjects())
    with pytest.raises(InvalidSubject, match="must not be empty"):
        validate_pattern(Subjects())


# Each bad segment, the rule its error names (Go's rules first, then goflux's own).
BAD_SEGMENTS: list[tuple[object, str]] = [
    ("", "must not be empty"),
    ("bad.segment", "must not contain '.'"),
    ("foo.bar", "must not contain '.'"),
    (".", "must not contain '.'"),
    ("events.*", "must not contain '.'"),
    ("*", "must not contain a wildcard"),
    ("ev*nts", "must not contain a wildcard"),
    (">", "must not contain a wildcard"),
    ("a>", "must not contain a wildcard"),
    ("my event", "must not contain whitespace"),
    ("tab\there", "must not contain whitespace"),
    ("new\nline", "must not contain whitespace"),
    ("car\rriage", "must not contain whitespace"),
    ("no\u00a0break", "must not contain whitespace"),
    ("em\u2003space", "must not contain whitespace"),
    ("nul\x00", "must not contain a control character"),
    ("del\x7f", "must not contain a control character"),
    ("esc\x1b", "must not contain a control character"),
    (1, "must be a str, not int"),
    (None, "must be a str, not NoneType"),
    (b"order", "must be a str, not bytes"),
]

STAGES: list[tuple[str, Callable[[object], object]]] = [
    ("prefix segment 2", lambda s: Subjects("prod", s)),  # type: ignore[arg-type]
    ("domain", SubjectDomain),  # type: ignore[list-item]
    ("domain", lambda s: Subjects("prod").domain(s)),  # type: ignore[arg-type]
    ("entity", lambda s: SubjectDomain("user").entity(s)),  # type: ignore[arg-type]
    ("event", lambda s: SubjectDomain("user").entity("profile").event(s)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("segment", "rule"), BAD_SEGMENTS)
@pytest.mark.parametrize(("part", "build"), STAGES)
def test_every_rule_refuses_at_every_stage(
    segment: object, rule: str, part: str, build: Callable[[object], object]
) -> None:
    with pytest.raises(SubjectError) as caught:
        build(segment)
    error = caught.value
    assert isinstance(error, InvalidSubject)  # existing `except InvalidSubject` still catches
    assert isinstance(error, ValueError)
    assert error.rule.startswith(rule)
    assert error.part == part
    assert error.segment is segment
    assert part in str(error)
    assert repr(segment) in str(error)
    assert rule in str(error)


def test_a_str_subclass_segment_counts_by_its_characters() -> None:
    class Region(str, enum.Enum):  # noqa: UP042 - str() of this mixin is "Region.EU"
        EU = "eu"

    assert Subjects("prod").domain(Region.EU) == "prod.eu"
    assert type(str.__str__(Subjects("prod").domain(Region.EU))) is str


def test_a_subject_longer_than_the_limit_is_refused_where_it_grows() -> None:
    long = "x" * (MAX_SUBJECT_BYTES - 10)
    domain = SubjectDomain(long)
    with pytest.raises(SubjectError, match=f"longer than {MAX_SUBJECT_BYTES} bytes") as caught:
        domain.entity("y" * 20)
    assert caught.value.part == "entity"
    with pytest.raises(SubjectError, match="longer than"):
        Subjects("é" * (MAX_SUBJECT_BYTES // 2 + 1))  # bytes, not characters, count
    almost = SubjectDomain("x" * (MAX_SUBJECT_BYTES - 1))
    with pytest.raises(SubjectError, match="longer than"):
        almost.all()
