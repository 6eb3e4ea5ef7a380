"""goflux's codecs against npm packages no one here wrote, both directions, same bytes.

tests/node/codecs.mjs encodes and decodes with @msgpack/msgpack, js-yaml 5 (YAML 1.2),
smol-toml and fast-xml-parser. CSV has no npm peer installed: its golden vectors are
goencode's (tests/codecs/test_csv.py).
"""

from __future__ import annotations

import base64
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from goflux.codecs import MsgpackCodec, TomlCodec, XmlCodec, YamlCodec
from tests.codecs.models import SAMPLES, Order, large
from tests.codecs.test_yaml import Scalars
from tests.nodejs import NodeService

# The megabyte order takes Node and goflux seconds a round trip: the full tier only.
CASES = [*sorted(SAMPLES), pytest.param("large", marks=pytest.mark.slow)]


def sample(name: str) -> Order:
    return large() if name == "large" else SAMPLES[name]


def tagged(obj: Any) -> Any:
    """Python values as codecs.mjs's tagged JSON."""
    if isinstance(obj, dict):
        return {key: tagged(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [tagged(value) for value in obj]
    if isinstance(obj, bytes):
        return {"$bytes": base64.b64encode(obj).decode()}
    if isinstance(obj, datetime):  # JavaScript's Date: milliseconds, Z
        return {"$date": obj.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"$float": "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")}
    return obj


def untagged(obj: Any) -> Any:
    """codecs.mjs's tagged JSON as values pydantic validates."""
    if isinstance(obj, list):
        return [untagged(value) for value in obj]
    if isinstance(obj, dict):
        if "$bytes" in obj:
            return base64.b64decode(obj["$bytes"])
        if "$date" in obj:
            return obj["$date"]
        if "$float" in obj:
            return float(obj["$float"].replace("Infinity", "inf"))
        return {key: untagged(value) for key, value in obj.items()}
    return obj


# One Node process for every conversion of this test process (its packages load once).
NODE = NodeService("codecs.mjs")


async def node_decodes(fmt: str, data: bytes, tmp_path: Path, arrays: str = "") -> Any:
    path = tmp_path / f"from-python.{fmt}"
    path.write_bytes(data)
    return untagged(NODE.ask("decode", fmt, str(path), arrays))


async def node_encodes(fmt: str, value: Any, tmp_path: Path, root: str = "") -> bytes:
    source, target = tmp_path / "value.json", tmp_path / f"from-node.{fmt}"
    source.write_text(json.dumps(tagged(value)))
    NODE.ask("encode", fmt, str(source), str(target), root)
    return target.read_bytes()


async def node_recodes(fmt: str, data: bytes, tmp_path: Path) -> bytes:
    source, target = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    source.write_bytes(data)
    NODE.ask("recode", fmt, str(source), str(target))
    return target.read_bytes()


# ---------------------------------------------------------------- MessagePack


@pytest.mark.parametrize("name", CASES)
async def test_msgpack_node_decodes_goflux(name: str, tmp_path: Path) -> None:
    order = sample(name)
    seen = await node_decodes("msgpack", MsgpackCodec(Order).encode(order), tmp_path)
    assert seen == untagged(tagged(order.model_dump(by_alias=True)))  # created a Date
    assert Order.model_validate(seen) == order


@pytest.mark.parametrize("name", CASES)
async def test_msgpack_goflux_decodes_node_on_the_same_bytes(name: str, tmp_path: Path) -> None:
    order = sample(name)
    data = await node_encodes("msgpack", order.model_dump(by_alias=True), tmp_path)
    assert MsgpackCodec(Order).decode(data) == order
    assert data == MsgpackCodec(Order).encode(order)  # canonical: the same bytes


async def test_msgpack_node_reencodes_goflux_bytes_unchanged(tmp_path: Path) -> None:
    data = MsgpackCodec(Order).encode(SAMPLES["unicode"])
    assert await node_recodes("msgpack", data, tmp_path) == data


async def test_msgpack_bytes_travel_as_bin(tmp_path: Path) -> None:
    codec: MsgpackCodec[dict[str, bytes]] = MsgpackCodec(dict[str, bytes])
    value = {"raw": bytes(range(256))}
    assert await node_decodes("msgpack", codec.encode(value), tmp_path) == value
    assert codec.decode(await node_encodes("msgpack", value, tmp_path)) == value


# ---------------------------------------------------------------- YAML


@pytest.mark.parametrize("name", CASES)
async def test_yaml_js_yaml_decodes_goflux(name: str, tmp_path: Path) -> None:
    order = sample(name)
    seen = await node_decodes("yaml", YamlCodec(Order).encode(order), tmp_path)
    assert Order.model_validate(seen) == order


@pytest.mark.parametrize("name", CASES)
async def test_yaml_goflux_decodes_js_yaml(name: str, tmp_path: Path) -> None:
    order = sample(name)
    data = await node_encodes("yaml", order.model_dump(by_alias=True), tmp_path)
    assert YamlCodec(Order).decode(data) == order


async def test_yaml_1_2_scalars_survive_js_yaml(tmp_path: Path) -> None:
    codec = YamlCodec(Scalars)
    data = codec.encode(Scalars())
    # js-yaml reads every one of them as the string it is...
    assert await node_decodes("yaml", data, tmp_path) == Scalars().model_dump()
    # ...writes them back (quoting as it sees fit), and goflux reads the same strings.
    assert codec.decode(await node_recodes("yaml", data, tmp_path)) == Scalars()
    assert codec.decode(await node_encodes("yaml", Scalars().model_dump(), tmp_path)) == Scalars()


async def test_yaml_plain_scalars_mean_the_same_to_js_yaml_and_goflux(tmp_path: Path) -> None:
    text = b"a: 08001\nb: no\nc: on\nd: 2001-12-14\ne: 0o17\nf: .inf\ng: ~\nh: 1e3\n"
    seen = await node_decodes("yaml", text, tmp_path)
    ours = YamlCodec(dict[str, Any]).decode(text)
    assert seen == ours == {
        "a": 8001, "b": "no", "c": "on", "d": "2001-12-14", "e": 15, "f": math.inf,
        "g": None, "h": 1000.0,
    }  # fmt: skip


async def test_yaml_line_separators_survive_js_yaml(tmp_path: Path) -> None:
    # NEL, LS and PS: YAML 1.1 emitters fold them like line breaks unless escaped.
    value = {"a": "a\u2028b", "b": " \u2028", "c": "x\u2029 y", "d": "x\x85y", "e": "1\n2\u2028"}
    codec = YamlCodec(dict[str, str])
    assert await node_decodes("yaml", codec.encode(value), tmp_path) == value
    assert codec.decode(await node_encodes("yaml", value, tmp_path)) == value


# ---------------------------------------------------------------- TOML


@pytest.mark.parametrize("name", CASES)
async def test_toml_smol_toml_decodes_goflux(name: str, tmp_path: Path) -> None:
    order = sample(name)
    seen = await node_decodes("toml", TomlCodec(Order).encode(order), tmp_path)
    expected = untagged(tagged(order.model_dump(by_alias=True, exclude_none=True)))
    # A TOML offset date-time (smol-toml keeps the offset as written): the same instant.
    assert datetime.fromisoformat(seen.pop("created")) == order.created
    assert seen == {key: value for key, value in expected.items() if key != "created"}
    seen["created"] = order.created
    assert Order.model_validate(seen) == order


@pytest.mark.parametrize("name", CASES)
async def test_toml_goflux_decodes_smol_toml(name: str, tmp_path: Path) -> None:
    order = sample(name)
    value = order.model_dump(by_alias=True, exclude_none=True)
    assert TomlCodec(Order).decode(await node_encodes("toml", value, tmp_path)) == order


# ---------------------------------------------------------------- XML


@pytest.mark.parametrize("name", CASES)
async def test_xml_fast_xml_parser_decodes_goflux(name: str, tmp_path: Path) -> None:
    order = sample(name)
    seen = await node_decodes("xml", XmlCodec(Order).encode(order), tmp_path, "lines,tags")
    fields = seen["Order"]
    assert fields["id"] == order.id
    assert fields.get("tags", []) == order.tags
    assert Order.model_validate({"lines": [], "tags": [], **fields}) == order


@pytest.mark.parametrize("name", CASES)
async def test_xml_goflux_decodes_fast_xml_parser(name: str, tmp_path: Path) -> None:
    order = sample(name)
    value = order.model_dump(mode="json", by_alias=True, exclude_none=True)
    data = await node_encodes("xml", value, tmp_path, "Order")
    assert XmlCodec(Order).decode(data) == order
