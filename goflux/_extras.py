"""Optional dependencies, imported on first use: :func:`require` names what is missing."""

from __future__ import annotations

from importlib.util import find_spec

from goflux._errors import MissingDependency

__all__ = ("require",)


def require(module: str, extra: str, what: str) -> None:
    """Check that ``module``, an optional dependency of ``what``, is installed.

    Call it right before importing the module on first use.

    Raises:
        MissingDependency: It is not installed; the message says what needs it and
            ``pip install 'goflux[extra]'``.
    """
    try:
        spec = find_spec(module)
    except ModuleNotFoundError:  # "a.b" imports "a" first, and "a" is not installed either
        spec = None
    if spec is None:
        raise MissingDependency(
            f"{what} needs {module}, which is not installed: pip install 'goflux[{extra}]'"
        )
