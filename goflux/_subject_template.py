"""Subject templates with typed parameters: :class:`SubjectTemplate`.

``SubjectTemplate("orders.{region}.{order_id}.created", OrderKey)`` names a family of
subjects whose tokens carry data. :meth:`~SubjectTemplate.format` builds one subject
from the parameters (validated as ``OrderKey`` and as subject tokens),
:attr:`~SubjectTemplate.pattern` is the wildcard pattern that subscribes to all of them
(``orders.*.*.created``), and :meth:`~SubjectTemplate.parse` turns a received subject
back into a validated ``OrderKey``. :meth:`~SubjectTemplate.handler` hands a handler the
parameters of each message it receives.

The parameters are a pydantic model or a TypedDict whose fields are exactly the
template's placeholders, each of a type whose value is one token both ways: ``str``,
``int``, ``uuid.UUID``, or a ``Literal`` or ``Enum`` of str or of int values (with
pydantic constraints through ``Annotated`` if wanted). Everything else (floats, bools,
optionals, unions) is refused when the template is made.

The pattern is a ``str`` subclass that knows its template: a subscription started on it
reports the template as ``messaging.destination.template`` in its telemetry, and
``goflux asyncapi`` documents the template's parameters on its channel.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import re
import typing
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, NamedTuple, TypeVar, cast

import pydantic
import typing_extensions

from goflux._errors import InvalidSubject, NonRetryable, SubjectError, SubjectMismatch
from goflux._interfaces import Handler
from goflux._message import Message
from goflux._subjects import MAX_SUBJECT_BYTES, TOKEN, check_length, check_token, too_long

__all__ = ("SubjectTemplate", "destination_template", "template_of")

P = TypeVar("P")
T = TypeVar("T")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")  # how int.__repr__ writes an int
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TOKEN_TYPES = (
    "str, int, uuid.UUID, or a Literal or Enum of str or of int values "
    "(a float, bool, None or union would not read back as the value written)"
)

_Kind = Literal["str", "int", "uuid"]


class _Pattern(str):
    """A template's subscription pattern: the wildcard string, knowing its template."""

    subject_template: SubjectTemplate[Any]

    def __new__(cls, value: str, template: SubjectTemplate[Any]) -> _Pattern:
        made = str.__new__(cls, value)
        object.__setattr__(made, "subject_template", template)
        return made

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a template's pattern is immutable (setting {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a template's pattern is immutable (deleting {name!r})")

    def __reduce__(self) -> tuple[object, tuple[object, str]]:
        return getattr, (self.subject_template, "pattern")


def template_of(subject: str) -> SubjectTemplate[Any] | None:
    """The template whose :attr:`~SubjectTemplate.pattern` ``subject`` is, or None."""
    return subject.subject_template if type(subject) is _Pattern else None


def destination_template(pattern: str) -> str:
    """What telemetry reports as a subscription's ``messaging.destination.template``.

    The template's text for a template's pattern (``orders.{region}.created``), else
    the pattern itself.
    """
    return pattern.subject_template.template if type(pattern) is _Pattern else pattern


def _unwrap(annotation: object) -> object:
    """The type under ``Annotated``, ``Required``/``NotRequired`` and ``NewType``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (
            typing.Annotated,
            typing.Required,
            typing.NotRequired,
            typing_extensions.Required,
            typing_extensions.NotRequired,
        ):
            annotation = typing.get_args(annotation)[0]
        elif isinstance(annotation, typing.NewType):
            annotation = annotation.__supertype__
        else:
            return annotation


def _values_kind(values: list[object]) -> _Kind | None:
    if values and all(type(v) is str or isinstance(v, str) for v in values):
        return "str"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    return None


def _render(value: object) -> str:
    """A validated parameter value as its token's characters."""
    if type(value) is str:  # the common case first
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, int):
        return int.__repr__(value)
    return str(value)  # uuid.UUID


def _json_format(names: list[str], kinds: list[_Kind]) -> str:
    """The %-format that makes the JSON object of a subject's tokens.

    ``parse`` reads the tokens as ``{"region": "eu", "n": 7}``: JSON's rules are the ones
    under which a strict model takes an Enum's value, a UUID or an int from a token.
    """
    members = [
        f'"{name}":%s' if kind == "int" else f'"{name}":"%s"'
        for name, kind in zip(names, kinds, strict=True)
    ]
    return "{" + ",".join(members) + "}"


def _positions(kinds: list[_Kind], *wanted: _Kind) -> tuple[int, ...]:
    return tuple(index for index, kind in enumerate(kinds) if kind in wanted)


def _kind_of(name: str, annotation: object, template: str) -> _Kind:
    """How a token of parameter ``name`` reads before validation; refuse other types.

    Raises:
        SubjectError: The type's values are not one token each, both ways.
    """
    kind: _Kind | None = None
    values: list[object] = []
    plain = _unwrap(annotation)
    if typing.get_origin(plain) in (Literal, typing_extensions.Literal):
        values = list(typing.get_args(plain))
        kind = _values_kind(values)
    elif isinstance(plain, type) and issubclass(plain, enum.Enum):
        values = [member.value for member in plain]
        kind = _values_kind(values)
    elif isinstance(plain, type) and issubclass(plain, bool):
        kind = None
    elif isinstance(plain, type) and issubclass(plain, int):
        kind = "int"
    elif isinstance(plain, type) and issubclass(plain, str):
        kind = "str"
    elif isinstance(plain, type) and issubclass(plain, uuid.UUID):
        kind = "uuid"
    part = f"parameter {name!r}"
    if kind is None:
        rule = f"its type {annotation!r} is not one subject token; use {_TOKEN_TYPES}"
        raise SubjectError(
            f"invalid template {template!r}: {part}: {rule}",
            subject=template,
            segment=annotation,
            part=part,
            rule=rule,
        )
    for value in values:  # a Literal's or Enum's values must each be a token
        try:
            token = _render(value)
        except ValueError as exc:  # an int of more digits than Python writes out
            rule = f"its value is not one subject token: {exc}"
            raise SubjectError(
                f"invalid template {template!r}: {part}: {rule}",
                subject=template,
                segment=annotation,
                part=part,
                rule=rule,
            ) from exc
        check_token(token, part=f"{part} value {value!r}", subject=template)
    return kind


class _Fields(NamedTuple):
    """How a template validates its parameter type, whichever kind it is."""

    annotations: dict[str, object]  # each field's type, by name
    model: type[pydantic.BaseModel] | None  # a pydantic model, else None (a TypedDict)
    validate_python: Callable[[object], Any]  # Python values -> the model or the dict
    validate_json: Callable[[str], Any]  # a JSON object of the tokens
    json_schema: Callable[[], dict[str, Any]]


def _typed_dict_adapter(params: type[Any]) -> pydantic.TypeAdapter[Any]:
    """A TypeAdapter of TypedDict ``params``, even a ``typing.TypedDict`` on Python 3.11.

    pydantic refuses ``typing.TypedDict`` before Python 3.12; the keys and types are the
    same in a ``typing_extensions.TypedDict`` made of them, which keeps the name, the
    module and the pydantic config (``@with_config``).
    """
    try:
        return pydantic.TypeAdapter(params)
    except pydantic.PydanticUserError as exc:
        if exc.code != "typed-dict-version":
            raise
    hints = typing.get_type_hints(params, include_extras=True)
    make: Any = typing_extensions.TypedDict  # called with a name that is not a literal
    twin: Any = make(params.__name__, hints)
    twin.__module__ = params.__module__
    twin.__qualname__ = params.__qualname__
    config = getattr(params, "__pydantic_config__", None)
    if config is not None:
        twin.__pydantic_config__ = config
    return pydantic.TypeAdapter(twin)


def _fields(params: type[Any], template: str) -> _Fields:
    """How to validate ``params``, a pydantic model or a TypedDict.

    Raises:
        SubjectError: ``params`` is neither a pydantic model nor a TypedDict, a field
            has an alias, a TypedDict key is not required, or pydantic cannot make a
            validator of it (the pydantic error chained).
    """

    def refuse(part: str, segment: object, rule: str) -> SubjectError:
        return SubjectError(
            f"invalid template {template!r}: {part}: {rule}",
            subject=template,
            segment=segment,
            part=part,
            rule=rule,
        )

    if isinstance(params, type) and issubclass(params, pydantic.BaseModel):
        for name, info in params.model_fields.items():
            if info.alias not in (None, name) or info.validation_alias not in (None, name):
                raise refuse(
                    f"parameter {name!r}",
                    name,
                    "has an alias; a placeholder names the field itself",
                )
        validator = params.__pydantic_validator__
        return _Fields(
            {name: info.annotation for name, info in params.model_fields.items()},
            params,
            validator.validate_python,
            validator.validate_json,
            params.model_json_schema,
        )
    if typing.is_typeddict(params) or typing_extensions.is_typeddict(params):
        try:
            hints: dict[str, object] = typing.get_type_hints(params, include_extras=True)
            optional = set(hints) - set(params.__required_keys__)
            if optional:
                name = sorted(optional)[0]
                raise refuse(f"parameter {name!r}", name, "must be a required key of the TypedDict")
            adapter = _typed_dict_adapter(params)
        except SubjectError:
            raise
        except Exception as exc:  # pydantic's, or a type hint that does not resolve
            raise refuse(
                "parameters", params, f"pydantic cannot validate {params!r}: {exc}"
            ) from exc
        return _Fields(
            hints,
            None,
            adapter.validator.validate_python,
            adapter.validator.validate_json,
            adapter.json_schema,
        )
    raise refuse(
        "parameters",
        params,
        f"must be a pydantic model or a TypedDict, not {params!r}",
    )


def _first_field(error: pydantic.ValidationError) -> str | None:
    for detail in error.errors():
        loc = detail.get("loc", ())
        if loc and isinstance(loc[0], str):
            return loc[0]
    return None


class SubjectTemplate(Generic[P]):
    """A subject with typed parameters in some of its tokens.

    ``SubjectTemplate("orders.{region}.{order_id}.created", OrderKey)``: each
    ``{name}`` placeholder is a whole token, and the placeholders are exactly the fields
    of ``params``, a pydantic model or a TypedDict, each field of a type whose values
    are one token: ``str``, ``int``, ``uuid.UUID``, a ``Literal`` or ``Enum`` of str or
    of int values. The template is immutable, and pickles if ``params`` does.

    Args:
        template: The subject with placeholders.
        params: The type of the parameters.

    Raises:
        SubjectError: A literal token breaks the subject rules, a placeholder is not a
            whole token or appears twice, the placeholders are not exactly the fields,
            a field's type is not one token, or ``params`` is neither a pydantic model
            nor a TypedDict. The error names the token or parameter and the rule.
    """

    __slots__ = (
        "_checked",
        "_fields",
        "_int_positions",
        "_json",
        "_json_schema",
        "_model",
        "_names",
        "_params",
        "_parts",
        "_pattern",
        "_pieces",
        "_regex",
        "_template",
        "_uuid_positions",
        "_validate",
        "_validate_json",
    )

    _template: str
    _params: type[P]
    _model: type[pydantic.BaseModel] | None
    _names: tuple[str, ...]
    _regex: re.Pattern[str]
    _pattern: _Pattern
    _fields: frozenset[str]
    _parts: tuple[tuple[str, str], ...]
    _pieces: tuple[str | None, ...]
    _validate: Callable[[object], Any]
    _validate_json: Callable[[str], Any]
    _json: str
    _int_positions: tuple[int, ...]
    _uuid_positions: tuple[int, ...]
    _checked: tuple[tuple[int, str], ...]
    _json_schema: Callable[[], dict[str, Any]]

    def __init__(self, template: str, params: type[P]) -> None:
        """Check ``template`` against ``params`` and prepare parsing."""
        if not isinstance(template, str):
            raise SubjectError(
                f"a subject template must be a str, not {type(template).__name__}",
                subject=template,
                segment=template,
                part="template",
                rule="must be a str",
            )
        spec = _fields(cast(type[Any], params), template)
        names: list[str] = []
        wild: list[str] = []
        expression: list[str] = []
        for index, token in enumerate(template.split("."), start=1):
            found = _PLACEHOLDER.fullmatch(token)
            if found is not None:
                name = found.group(1)
                if name in names:
                    raise self._refuse(template, f"placeholder {{{name}}}", token, "appears twice")
                names.append(name)
                wild.append("*")
                expression.append(f"({TOKEN})")
                continue
            if "{" in token or "}" in token:
                raise self._refuse(
                    template,
                    f"token {index}",
                    token,
                    "a placeholder must be a whole token ({name}, name an identifier)",
                )
            check_token(token, part=f"token {index}", subject=template)
            wild.append(token)
            expression.append(re.escape(token))
        fields = spec.annotations
        self._check_placeholders(template, names, fields)
        kinds = [_kind_of(name, fields[name], template) for name in names]
        pattern = ".".join(wild)
        check_length(pattern, part="template", segment=template)
        sets = object.__setattr__
        sets(self, "_template", template)
        sets(self, "_params", params)
        sets(self, "_model", spec.model)
        sets(self, "_names", tuple(names))
        sets(self, "_regex", re.compile(r"\.".join(expression)))
        sets(self, "_pattern", _Pattern(pattern, self))
        sets(self, "_fields", frozenset(names))
        sets(self, "_parts", tuple((name, f"parameter {name!r}") for name in names))
        pieces = template.split(".")
        sets(self, "_pieces", tuple(None if "{" in piece else piece for piece in pieces))
        sets(self, "_validate", spec.validate_python)
        sets(self, "_validate_json", spec.validate_json)
        sets(self, "_json_schema", spec.json_schema)
        sets(self, "_json", _json_format(names, kinds))
        sets(self, "_int_positions", _positions(kinds, "int"))
        sets(self, "_uuid_positions", _positions(kinds, "uuid"))
        # the values parse checks are written as their tokens (a UUID's token is checked
        # instead: written canonically, it reads back so)
        sets(self, "_checked", tuple((i, names[i]) for i in _positions(kinds, "str", "int")))

    @classmethod
    def _check_placeholders(
        cls, template: str, names: list[str], fields: Mapping[str, object]
    ) -> None:
        if set(names) != set(fields):
            missing = [name for name in fields if name not in names]
            extra = [name for name in names if name not in fields]
            rule = "the placeholders must be exactly the fields of the parameters"
            if missing:
                rule += f"; no placeholder for {', '.join(map(repr, missing))}"
            if extra:
                rule += f"; no field for {', '.join(map(repr, extra))}"
            raise cls._refuse(template, "placeholders", names, rule)

    @staticmethod
    def _refuse(template: str, part: str, segment: object, rule: str) -> SubjectError:
        return SubjectError(
            f"invalid template {template!r}: {part}: {rule}",
            subject=template,
            segment=segment,
            part=part,
            rule=rule,
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a SubjectTemplate is immutable (setting {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a SubjectTemplate is immutable (deleting {name!r})")

    def __reduce__(self) -> tuple[object, tuple[str, type[P]]]:
        return type(self), (self._template, self._params)

    def __repr__(self) -> str:
        return f"SubjectTemplate({self._template!r}, {self._params.__qualname__})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubjectTemplate):
            return NotImplemented
        return (self._template, self._params) == (other._template, other._params)

    def __hash__(self) -> int:
        return hash((self._template, self._params))

    @property
    def template(self) -> str:
        """The template's text: ``orders.{region}.{order_id}.created``."""
        return self._template

    @property
    def params(self) -> type[P]:
        """The type of the parameters (the pydantic model or TypedDict given)."""
        return self._params

    @property
    def names(self) -> tuple[str, ...]:
        """The placeholders' names, in the order they appear."""
        return self._names

    @property
    def pattern(self) -> str:
        """The pattern that subscribes to every subject of the template: ``orders.*.*.created``.

        A ``str`` that knows its template: a subscription started on it reports the
        template in its telemetry, and ``goflux asyncapi`` documents its parameters.
        """
        return self._pattern

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the parameters (an object with one property per placeholder)."""
        return self._json_schema()

    def format(self, params: P | Mapping[str, object] | None = None, /, **values: object) -> str:
        """The subject of the given parameters: ``format(region="eu", order_id="o-1")``.

        Pass the parameters as keywords, or as one value (a ``params`` instance or a
        mapping). They are validated as the parameter type (a model instance as it
        is), then each value must be one subject token.

        Raises:
            SubjectError: A parameter is missing, unknown or does not validate (the
                pydantic ``ValidationError`` chained), or its value is not a token
                (empty, or holding ``.``, ``*``, ``>``, whitespace or a control
                character); the error names the parameter and the rule.
            TypeError: Both a positional value and keywords are given.
        """
        if params is not None:
            if values:
                raise TypeError("pass the parameters as one value or as keywords, not both")
            if self._model is not None and isinstance(params, self._model):
                return self._render(params.__dict__, params)
            if not isinstance(params, Mapping):
                raise TypeError(
                    f"parameters must be a {self._params.__qualname__} or a mapping, "
                    f"not {type(params).__name__}"
                )
            values = dict(params)
        unknown = [name for name in values if name not in self._fields]
        if unknown:
            part = f"parameter {unknown[0]!r}"
            raise self._refuse(self._template, part, unknown[0], "is not a placeholder")
        try:
            valid = self._validate(values)
        except pydantic.ValidationError as exc:
            name = _first_field(exc)
            part = "parameters" if name is None else f"parameter {name!r}"
            raise SubjectError(
                f"invalid {part} for template {self._template!r}: "
                f"{exc.error_count()} validation error(s): {exc.errors()[0]['msg']}",
                subject=self._template,
                segment=values.get(name) if name is not None else values,
                part=part,
                rule="does not validate as the parameter type",
            ) from exc
        return self._render(valid if self._model is None else valid.__dict__, valid)

    def _render(self, fields: Mapping[str, object], params: object) -> str:
        template = self._template
        try:
            tokens = iter(
                [
                    check_token(_render(fields[name]), part=part, subject=template)
                    for name, part in self._parts
                ]
            )
        except InvalidSubject:
            raise
        except (KeyError, ValueError) as exc:  # a model_construct()ed model, a huge int
            raise self._unwritable(fields) from exc
        subject = ".".join([next(tokens) if piece is None else piece for piece in self._pieces])
        if len(subject) * 4 > MAX_SUBJECT_BYTES:
            check_length(subject, part="parameters", segment=params)
        return subject

    def _unwritable(self, fields: Mapping[str, object]) -> SubjectError:
        """The error for the first parameter that has no value or none Python can write."""
        for name in self._names:
            part = f"parameter {name!r}"
            if name not in fields:
                segment: object = None
                rule = "is missing (a model made without validation?)"
                break
            try:
                _render(fields[name])
            except ValueError as exc:
                segment = fields[name]
                rule = f"cannot be written as a token: {exc}"
                break
        else:  # pragma: no cover - _render failed for some parameter above
            part, segment, rule = "parameters", fields, "cannot be written as tokens"
        return SubjectError(
            f"invalid {part} for template {self._template!r}: {rule}",
            subject=self._template,
            segment=segment,
            part=part,
            rule=rule,
        )

    def matches(self, subject: str) -> bool:
        """Report whether ``subject``'s tokens fit the template (the types unchecked)."""
        return (
            isinstance(subject, str)
            and not too_long(subject)
            and self._regex.fullmatch(subject) is not None
        )

    def parse(self, subject: str) -> P:
        """The validated parameters of ``subject``: a model instance, or a TypedDict's dict.

        Raises:
            SubjectMismatch: ``subject`` does not fit the template, or its tokens do
                not validate as the parameter type (the pydantic ``ValidationError``
                chained); the error names the template and the subject.
        """
        found = (
            self._regex.fullmatch(subject)
            if isinstance(subject, str)
            and (len(subject) * 4 <= MAX_SUBJECT_BYTES or not too_long(subject))
            else None
        )
        if found is None:
            raise SubjectMismatch(
                f"subject {subject!r} does not fit the template {self._template!r}",
                subject=subject,
                template=self._template,
                rule="does not fit the template",
            )
        tokens: tuple[str, ...] = found.groups()
        plain = '"' not in subject and "\\" not in subject  # no JSON escape needed
        for index in self._int_positions:
            if _CANONICAL_INT.fullmatch(tokens[index]) is None:  # 007, +7, -0, 7_0, x
                plain = False  # read as a JSON string: pydantic says why it is no int
        text = self._json % tokens if plain else self._json_of(tokens)
        try:
            valid = self._validate_json(text)
        except pydantic.ValidationError as exc:
            failed = _first_field(exc)
            part = "parameters" if failed is None else f"parameter {failed!r}"
            raise SubjectMismatch(
                f"subject {subject!r} does not fit the template {self._template!r}: "
                f"{part}: {exc.errors()[0]['msg']}",
                subject=subject,
                template=self._template,
                segment=dict(zip(self._names, tokens, strict=True)).get(failed or ""),
                part=part,
                rule="does not validate as the parameter type",
            ) from exc
        for index in self._uuid_positions:  # valid, but written otherwise: UPPER, urn:uuid:
            if _CANONICAL_UUID.fullmatch(tokens[index]) is None:
                raise self._not_canonical(subject, index, tokens[index])
        fields = valid if self._model is None else valid.__dict__
        for index, name in self._checked:  # 007 in lax mode, a value a validator changed
            value = fields[name]
            if (value if type(value) is str else _render(value)) != tokens[index]:
                raise self._written_otherwise(subject, name, tokens[index], value)
        return cast(P, valid)

    def _not_canonical(self, subject: str, index: int, token: str) -> SubjectMismatch:
        """The error for a UUID token not written as format writes a UUID."""
        part = f"parameter {self._names[index]!r}"
        rule = "is not a UUID as format writes one (lower-case hex, 8-4-4-4-12, hyphens)"
        return SubjectMismatch(
            f"subject {subject!r} does not fit the template {self._template!r}: "
            f"{part}: {token!r} {rule}",
            subject=subject,
            template=self._template,
            segment=token,
            part=part,
            rule=rule,
        )

    def _json_of(self, tokens: tuple[str, ...]) -> str:
        """The tokens as a JSON object, an int token that is not written as one a str."""
        values: dict[str, object] = dict(zip(self._names, tokens, strict=True))
        for index in self._int_positions:
            if _CANONICAL_INT.fullmatch(tokens[index]):
                values[self._names[index]] = int(tokens[index])
        return json.dumps(values)

    def _written_otherwise(
        self, subject: str, name: str, token: str, value: object
    ) -> SubjectMismatch:
        """The error for a token that is not written as format writes its value."""
        part = f"parameter {name!r}"
        rule = (
            f"reads as {value!r}, which is written {_render(value)!r}: a parameter "
            "reads back only from the token format writes"
        )
        return SubjectMismatch(
            f"subject {subject!r} does not fit the template {self._template!r}: "
            f"{part}: {token!r} {rule}",
            subject=subject,
            template=self._template,
            segment=token,
            part=part,
            rule=rule,
        )

    def handler(self, fn: Callable[[Message[T], P], Awaitable[None] | None]) -> Handler[T]:
        """A handler that calls ``fn(message, params)`` with the message's parameters.

        ``fn`` is an async function, or a plain one (as a pipe's function may be):
        what it returns is awaited if it is awaitable.

        Subscribe it on :attr:`pattern`. A message whose subject does not fit the
        template (a wider subscription, a parameter that does not validate) is never
        handed to ``fn``: the handler raises :class:`~goflux.NonRetryable` with the
        :class:`~goflux.SubjectMismatch` chained, so the transport treats it as it
        treats any permanent failure (JetStream terminates it, after a dead letter if
        one is configured; HTTP answers 422; ``retry_ack`` does not retry it) instead of
        dropping it in silence or redelivering it in a loop. The returned handler
        carries ``fn``'s name and docstring.

        Raises:
            TypeError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        parse = self.parse
        template = self._template

        @functools.wraps(fn)
        async def handle(message: Message[T], /) -> None:
            try:
                params = parse(message.subject)
            except SubjectMismatch as exc:
                raise NonRetryable(
                    f"message on {message.subject!r} is not for the template {template!r}: "
                    f"{exc.rule}"
                ) from exc
            result = fn(message, params)
            if inspect.isawaitable(result):
                await result

        return handle
