"""``RunOptions`` and the ``goflux run`` flags that fill it: ranges and combinations."""

from __future__ import annotations

import pytest

from goflux.cli._main import main
from goflux.service import RunOptions


@pytest.mark.parametrize("port", [-1, 65536])
def test_an_http_port_out_of_range_is_refused(port: int) -> None:
    with pytest.raises(ValueError, match=rf"^HTTP port must be 0\.\.65535, got {port}$"):
        RunOptions(http_port=port)


def test_the_routes_and_the_probes_need_ports_of_their_own() -> None:
    with pytest.raises(ValueError, match=r"need ports of their own, both are 8080$"):
        RunOptions(http_port=8080, health_port=8080)
    assert RunOptions(http_port=0, health_port=0).http_port == 0  # two free ports
    assert RunOptions(http_port=8080, health_port=8081).http_host == "0.0.0.0"


def test_goflux_run_says_which_options_do_not_go_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "app:service", "--http-port", "8080", "--health-port", "8080"]) == 2
    assert capsys.readouterr().err == (
        "goflux run: error: the HTTP routes and the health probes need ports of their "
        "own, both are 8080\n"
    )


def test_goflux_run_refuses_a_bad_http_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "app:service", "--http-port", "70000"])
    assert exited.value.code == 2
    assert "--http-port: port must be 0..65535 (0: any free port), got 70000" in (
        capsys.readouterr().err
    )
