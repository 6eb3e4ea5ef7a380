from __future__ import annotations

import pytest

from goflux import Headers, InvalidHeader, _wire
from goflux._headers import check_message_id
from goflux._wire import read_headers


def test_lookup_ignores_case_and_keeps_original_casing() -> None:
    h = Headers({"X-Tenant": "acme"})
    assert h["x-tenant"] == "acme"
    assert "X-TENANT" in h
    assert list(h) == ["X-Tenant"]


def test_multiple_values_in_order() -> None:
    h = Headers([("Tag", "a"), ("tag", "b")])
    h.add("TAG", "c")
    assert h.get_all("tag") == ["a", "b", "c"]
    assert h["Tag"] == "a"
    assert len(h) == 1
    assert h.multi_items() == [("Tag", "a"), ("Tag", "b"), ("Tag", "c")]


def test_mapping_with_sequences_and_assignment_replaces() -> None:
    h = Headers({"A": ["1", "2"], "B": "x"})
    assert h.get_all("a") == ["1", "2"]
    h["a"] = "3"
    assert h.get_all("A") == ["3"]
    assert list(h) == ["a", "B"]
    del h["b"]
    assert "B" not in h
    assert h.get("missing") is None
    assert h.get_all("missing") == []


def test_copy_is_independent_and_equality_ignores_name_case() -> None:
    h = Headers({"A": "1"})
    c = h.copy()
    c.add("A", "2")
    assert h.get_all("A") == ["1"]
    assert Headers({"a": "1"}) == Headers({"A": "1"})
    assert Headers({"a": "1"}) == {"A": "1"}
    assert Headers({"a": "1"}) != Headers({"a": "2"})
    assert Headers({"a": "1"}) != {"bad name": "1"}


@pytest.mark.parametrize("name", ["", "with space", "colon:", "new\nline", "ümlaut", 5])
def test_invalid_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidHeader, match="invalid header name"):
        Headers({name: "v"})  # type: ignore[dict-item]


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "line\nbreak", "nul\x00", 7, None])
def test_invalid_values_are_refused(value: object) -> None:
    with pytest.raises(InvalidHeader, match="X-Ok"):
        Headers().add("X-Ok", value)  # type: ignore[arg-type]


def test_message_id_must_travel_as_a_header_value() -> None:
    assert check_message_id("id-1") == "id-1"
    for bad in ("", "a\r\nb", None, 3):
        with pytest.raises(InvalidHeader):
            check_message_id(bad)


# ------------------------------------------------------------- received headers


def test_received_names_are_read_case_insensitively_however_first_spelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wire, "_KINDS", {})
    for _ in range(2):  # the second time from what the first remembered
        headers, message_id = read_headers(
            {
                "x-goflux-Tenant": "acme",
                "X-GOFLUX-Tag": "a",
                "traceparent": "00-x",
                "x-message-id": "m",
            }
        )
        assert headers is not None
        assert headers.multi_items() == [("Tenant", "acme"), ("Tag", "a")]
        assert message_id == "m"
        assert read_headers({"NATS-MSG-ID": "n", "Other": "o"}) == (None, "n")
        assert read_headers({"nats-msg-id": "n", "X-Message-Id": "m"})[1] == "m"  # ours first


def test_ever_new_header_names_are_read_without_growing_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer sending new names each time: past the bound, each is classified at each use."""
    monkeypatch.setattr(_wire, "_KINDS", {})
    for n in range(_wire.NAME_CACHE_LIMIT + 100):
        headers, message_id = read_headers({f"X-Goflux-K{n}": "v", f"Other-{n}": "w"})
        assert headers is not None
        assert headers.multi_items() == [(f"K{n}", "v")]
        assert message_id is None
    assert len(_wire._KINDS) == _wire.NAME_CACHE_LIMIT
    assert read_headers({"x-goflux-late": "1", "X-MESSAGE-ID": "m"})[1] == "m"


def test_long_received_names_are_classified_each_time_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wire, "_KINDS", {})
    long = "X-Goflux-" + "L" * _wire.CACHED_NAME_LENGTH
    for _ in range(2):
        headers, _ = read_headers({long: "v", "X-Goflux-Short": "s"})
        assert headers is not None
        assert headers.multi_items() == [(long[len("X-Goflux-") :], "v"), ("Short", "s")]
    assert list(_wire._KINDS) == ["X-Goflux-Short"]
