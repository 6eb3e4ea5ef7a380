"""The AsyncAPI document of a group or of a service: :func:`asyncapi_document`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from goflux._compose.endpoints import summary_of
from goflux._compose.group import Group
from goflux._errors import GofluxError
from goflux.asyncapi._document import Skipped, build_document
from goflux.service._load import Service, load_service

__all__ = ("AsyncAPI", "DescribeError", "asyncapi_document", "describe_service")

DEFAULT_VERSION = "0.0.0"


class DescribeError(GofluxError):
    """The service function failed while it filled the group to be described."""


@dataclass(frozen=True)
class AsyncAPI:
    """An AsyncAPI 3.0 document, and the endpoints it had to leave out.

    Attributes:
        document: The document as JSON-ready dicts and lists.
        skipped: Endpoints on no network (in-process channels) or of objects that do
            not describe themselves.
    """

    document: dict[str, Any]
    skipped: tuple[Skipped, ...] = ()

    def to_json(self) -> str:
        """The document as JSON (2-space indent, a final newline): the same bytes every run."""
        return json.dumps(self.document, indent=2, ensure_ascii=False) + "\n"

    def to_yaml(self) -> str:
        """The document as YAML, keys in the document's order.

        Raises:
            DescribeError: PyYAML is not installed (``pip install 'goflux[asyncapi]'``).
        """
        try:
            import yaml  # noqa: PLC0415 - optional: the asyncapi extra
        except ImportError as exc:
            raise DescribeError("YAML output needs PyYAML: pip install 'goflux[asyncapi]'") from exc

        class Plain(yaml.SafeDumper):
            """Every shared value written out again: no ``&id001`` anchors in a diff."""

            def ignore_aliases(self, data: object) -> bool:
                return True

        text: str = yaml.dump(
            self.document, Dumper=Plain, sort_keys=False, allow_unicode=True, width=100
        )
        return text


def asyncapi_document(
    group: Group,
    *,
    title: str | None = None,
    version: str | None = None,
    description: str | None = None,
) -> AsyncAPI:
    """The AsyncAPI 3.0 document of what ``group`` speaks (:attr:`Group.endpoints`).

    Starts nothing. A channel per subject (wildcards as parameters; on HTTP, per path
    ``{base}/{subject}``), a ``receive`` operation per subscription, stream and
    responder (with its reply), a ``send`` operation per declared or bound publisher
    (with the reply a requester expects); payload schemas from the codecs' pydantic
    types under ``components/schemas``; servers from the connections used, without
    credentials; HTTP members with AsyncAPI's HTTP bindings. The arguments win over
    :meth:`Group.describe`'s, which win over the defaults (title "goflux service",
    version 0.0.0).
    """
    about = group.about
    document, skipped = build_document(
        group.endpoints,
        title=title or about.title or "goflux service",
        version=version or about.version or DEFAULT_VERSION,
        description=description or about.description,
    )
    return AsyncAPI(document, skipped)


def _default_title(service: Service) -> str:
    module = getattr(service, "__module__", None) or "service"
    name = getattr(service, "__qualname__", "service")
    last = module.rpartition(".")[2]
    return last if name == "service" else f"{last}.{name}"


def _default_description(service: Service) -> str | None:
    own = summary_of(service)
    if own:
        return own
    module = sys.modules.get(getattr(service, "__module__", "") or "")
    return summary_of(module) if module is not None else None


async def describe_service(service: Service | str, *, app_dir: str | None = ".") -> AsyncAPI:
    """Build a service's group (call the service function) and return its document.

    ``service`` is the function or a ``MODULE:ATTR`` naming it. The function may
    connect, as it does when it runs; nothing is started: no subscription, no
    consumer, no start-up function (:meth:`Group.on_start`). What the group owns is
    closed before this returns.

    Raises:
        ServiceLoadError: ``MODULE:ATTR`` cannot be loaded.
        DescribeError: The service function raised (chained).
    """
    if isinstance(service, str):
        service = load_service(service, app_dir=app_dir)
    group = Group()
    try:
        try:
            await service(group)
        except Exception as exc:
            name = getattr(service, "__qualname__", repr(service))
            raise DescribeError(
                f"service {name!r} failed while filling its group: {type(exc).__name__}: {exc}"
            ) from exc
        return asyncapi_document(
            group,
            title=None if group.about.title else _default_title(service),
            description=None if group.about.description else _default_description(service),
        )
    finally:
        await group.stop()
