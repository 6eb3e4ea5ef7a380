"""Shared lifecycle plumbing for implementations of the interfaces."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ("CloseOnExit",)


class CloseOnExit:
    """Mixin: ``async with obj:`` returns ``obj`` and awaits ``obj.close()`` on exit."""

    __slots__ = ()

    async def close(self) -> None:
        """Release resources; subclasses implement it."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
