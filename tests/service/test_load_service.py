"""load_service: MODULE:ATTR to a service, or a clear ServiceLoadError."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from goflux import GofluxError
from goflux.service import ServiceLoadError, load_service
from tests.service import services


def test_it_finds_the_async_function() -> None:
    assert load_service("tests.service.services:gated") is services.gated


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("tests.service.services", "expected MODULE:ATTR"),
        (":gated", "expected MODULE:ATTR"),
        ("tests.service.services:", "expected MODULE:ATTR"),
        ("tests.service.nothing_here:service", "no module named 'tests.service.nothing_here'"),
        ("tests.service.services:gone", "has no attribute 'gone'"),
        ("tests.service.services:not_a_function", "is of type int, not an async function"),
        ("tests.service.services:not_async", "must be an async function taking a Group"),
        ("tests.service.services:Check", "has no attribute 'Check'"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(spec: str, said: str) -> None:
    with pytest.raises(ServiceLoadError, match=said) as caught:
        load_service(spec)
    assert isinstance(caught.value, GofluxError)


def test_an_error_inside_the_module_is_named_and_chained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_service puts app_dir first
    (tmp_path / "broken_app.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(ServiceLoadError, match="importing 'broken_app' failed") as caught:
        load_service("broken_app:service", app_dir=str(tmp_path))
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    (tmp_path / "arity_app.py").write_text("async def service(group, extra):\n    pass\n")
    with pytest.raises(ServiceLoadError, match="exactly one argument"):
        load_service("arity_app:service", app_dir=str(tmp_path))
