"""The subject builder: Go goflux's ``subject/nats`` chain, as immutable strings.

``Subjects("prod", "acme").domain("order").entity("item").event("created")`` is the
subject ``prod.acme.order.item.created``; ``.all()`` on a prefix, domain or entity is
the ``>`` wildcard under it. Every stage is a ``str`` subclass holding the subject
built so far, so a stage goes wherever a subject string goes (``publish``, ``start``,
f-strings, dict keys) and compares and hashes as its string. Each segment is checked
when it is added (:func:`goflux._subjects.check_token`), so a bad subject fails where
it is defined, at start-up, and never at the first publish.

The stages carry no state beyond their characters (``__slots__ = ()``): they are as
immutable as ``str``. They pickle and copy as themselves; unpickling checks the
segments again.
"""

from __future__ import annotations

from typing import Self, TypeVar

from goflux._subjects import check_length, check_token

__all__ = ("SubjectDomain", "SubjectEntity", "SubjectEvent", "Subjects")

_S = TypeVar("_S", bound="_Stage")


def _extend(cls: type[_S], base: str, name: object, part: str) -> _S:
    """``base.name`` as a ``cls``, after checking ``name`` and the length."""
    token = check_token(name, part=part, subject=base)
    value = f"{base}.{token}" if base else token
    check_length(value, part=part, segment=name)
    return str.__new__(cls, value)


def _all(base: str, part: str) -> str:
    value = f"{base}.>" if base else ">"
    return check_length(value, part=part, segment=">")


class _Stage(str):
    """What every stage shares: no attributes, pickling by its segments."""

    __slots__ = ()

    _least = 0  # segments a value of this stage has at least

    def __reduce__(self) -> tuple[object, tuple[type[_Stage], str]]:
        return _restore, (type(self), str.__str__(self))


def _restore(cls: type[_S], value: str) -> _S:
    """A stage back from its pickled string, its segments checked again."""
    segments = value.split(".") if value else []
    if len(segments) < cls._least:
        raise TypeError(f"{cls.__name__} needs {cls._least} segments at least, got {value!r}")
    built = ""
    for index, segment in enumerate(segments, start=1):
        built = _extend(_Stage, built, segment, f"segment {index}")
    return str.__new__(cls, built)


class Subjects(_Stage):
    """The root of the subject builder: zero or more prefix segments (Go's ``New``).

    ``Subjects("prod", "acme")`` is the string ``prod.acme``; ``Subjects()`` is the
    empty prefix, so that the next :meth:`domain` is the first token. The empty
    prefix is no subject: ``publish`` and ``start`` refuse it as any empty subject.

    Raises:
        SubjectError: A segment is not a str, is empty, or holds ``.``, ``*``, ``>``,
            whitespace or a control character; or the prefix is longer than
            :data:`goflux.MAX_SUBJECT_BYTES`. The error names the segment and the rule.
    """

    __slots__ = ()

    def __new__(cls, *prefix: str) -> Self:
        """Build the prefix from ``prefix``, checking each segment.

        Args:
            *prefix: The leading segments (environment, tenant, region, ...).
        """
        built = ""
        for index, segment in enumerate(prefix, start=1):
            built = _extend(_Stage, built, segment, f"prefix segment {index}")
        return str.__new__(cls, built)

    def domain(self, name: str) -> SubjectDomain:
        """Extend the prefix with a domain segment (Go's ``Subject.Domain``).

        Raises:
            SubjectError: ``name`` is not a valid token (the error says which rule).
        """
        return _extend(SubjectDomain, self, name, "domain")

    def all(self) -> str:
        """The ``>`` wildcard under the prefix (``prod.acme.>``; ``>`` for no prefix).

        Raises:
            SubjectError: The wildcard would be longer than
                :data:`goflux.MAX_SUBJECT_BYTES`.
        """
        return _all(self, "wildcard")


class SubjectDomain(_Stage):
    """The domain segment of a subject, after its prefix (Go's ``Domain``).

    ``SubjectDomain("order")`` is a domain without a prefix (Go's ``NewDomain``), the
    same as ``Subjects().domain("order")``; with a prefix, build it with
    :meth:`Subjects.domain`.

    Raises:
        SubjectError: ``name`` is not a valid token (the error says which rule).
    """

    __slots__ = ()

    _least = 1

    def __new__(cls, name: str) -> Self:
        """The domain ``name`` without a prefix (Go's ``NewDomain``).

        Args:
            name: The domain segment.
        """
        return _extend(cls, "", name, "domain")

    def entity(self, name: str) -> SubjectEntity:
        """Extend the domain with an entity segment (Go's ``Domain.Entity``).

        Raises:
            SubjectError: ``name`` is not a valid token (the error says which rule).
        """
        return _extend(SubjectEntity, self, name, "entity")

    def all(self) -> str:
        """The ``>`` wildcard under the domain (``prod.acme.order.>``).

        Raises:
            SubjectError: The wildcard would be longer than
                :data:`goflux.MAX_SUBJECT_BYTES`.
        """
        return _all(self, "wildcard")


class SubjectEntity(_Stage):
    """The entity segment of a subject, after its domain (Go's ``Entity``).

    Built with :meth:`SubjectDomain.entity`; ``SubjectEntity(domain, name)`` is the
    same.

    Raises:
        SubjectError: ``name`` is not a valid token (the error says which rule).
        TypeError: ``domain`` is not a :class:`SubjectDomain`.
    """

    __slots__ = ()

    _least = 2

    def __new__(cls, domain: SubjectDomain, name: str) -> Self:
        """The entity ``name`` under ``domain``.

        Args:
            domain: The domain it extends.
            name: The entity segment.
        """
        if not isinstance(domain, SubjectDomain):
            raise TypeError(f"an entity extends a SubjectDomain, not {type(domain).__name__}")
        return _extend(cls, domain, name, "entity")

    def event(self, name: str) -> SubjectEvent:
        """End the chain with an event segment: a complete subject (Go's ``Entity.Event``).

        Raises:
            SubjectError: ``name`` is not a valid token (the error says which rule).
        """
        return _extend(SubjectEvent, self, name, "event")

    def all(self) -> str:
        """The ``>`` wildcard under the entity (``prod.acme.order.item.>``).

        Raises:
            SubjectError: The wildcard would be longer than
                :data:`goflux.MAX_SUBJECT_BYTES`.
        """
        return _all(self, "wildcard")


class SubjectEvent(_Stage):
    """The event segment that ends the chain: a complete subject (Go's ``Event``).

    Built with :meth:`SubjectEntity.event`; ``SubjectEvent(entity, name)`` is the same.

    Raises:
        SubjectError: ``name`` is not a valid token (the error says which rule).
        TypeError: ``entity`` is not a :class:`SubjectEntity`.
    """

    __slots__ = ()

    _least = 3

    def __new__(cls, entity: SubjectEntity, name: str) -> Self:
        """The event ``name`` under ``entity``.

        Args:
            entity: The entity it extends.
            name: The event segment.
        """
        if not isinstance(entity, SubjectEntity):
            raise TypeError(f"an event extends a SubjectEntity, not {type(entity).__name__}")
        return _extend(cls, entity, name, "event")
