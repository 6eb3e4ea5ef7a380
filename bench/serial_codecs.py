"""The serialization codecs of goflux.codecs against their libraries called directly.

Each codec is measured beside the shortest path a user would write with the same
library and the same pydantic ``TypeAdapter``: dump to Python, then the format
library (encode); the format library, then ``validate_python`` (decode). The
10-field model of ``payload.py``; CSV a list of 100 of them. Each case counts the
results that came out right (the expected bytes, a model with the expected ID).
"""

from __future__ import annotations

import csv
import io
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import msgpack
import ormsgpack
import tomli_w
from defusedxml.ElementTree import fromstring
from pydantic import TypeAdapter
from ruamel.yaml import YAML

from bench.harness import Table, interleave
from bench.payload import ORDER, Order, numbered
from bench.sizes import Sizes
from goflux.codecs import CsvCodec, MsgpackCodec, TomlCodec, XmlCodec, YamlCodec

ROWS = 100  # the CSV payload: rows of the model
_OPTIONS = ormsgpack.OPT_DATETIME_AS_TIMESTAMP_EXT | ormsgpack.OPT_NAIVE_UTC
_READ = ormsgpack.OPT_DATETIME_AS_TIMESTAMP_EXT
# Each codec's libraries, writing and reading, as the baseline rows name them.
# MsgpackCodec writes and reads with ormsgpack; msgpack, the reference it falls back
# to, is shown beside it for reading.
LIBRARIES = {
    "MsgpackCodec": ("ormsgpack", "ormsgpack"),
    "YamlCodec": ("ruamel.yaml", "ruamel.yaml"),
    "TomlCodec": ("tomli-w", "tomllib"),
    "XmlCodec": ("ElementTree", "defusedxml"),
    "CsvCodec": ("csv", "csv"),
}
GOAL = 1.2  # each codec within 1.2 times the time of its library called directly


def key(name: str, step: str) -> str:
    """The table key of a codec's step: ``key("MsgpackCodec", "encode") == "msgpack-encode"``."""
    return f"{name.removesuffix('Codec').lower()}-{step}"


def _times(n: int, step: Callable[[], bool]) -> Callable[[], int]:
    def case() -> int:
        done = 0
        for _ in range(n):
            done += step()
        return done

    return case


def _yaml() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False

    def dump(obj: Any) -> bytes:
        out = io.BytesIO()
        yaml.dump(obj, out)
        return out.getvalue()

    return dump, yaml.load


def _xml_dump(obj: dict[str, Any]) -> bytes:
    root = ET.Element("Order")
    for key, value in obj.items():
        ET.SubElement(root, key).text = str(value)
    return ET.tostring(root, encoding="unicode", short_empty_elements=False).encode()


def _csv_dump(rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rows[0]))
    writer.writerows([list(row.values()) for row in rows])
    return out.getvalue().encode()


def _csv_load(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode(), newline="")))


def run(rounds: int, sizes: Sizes) -> list[Table]:
    n = sizes.codec_ops
    adapter = TypeAdapter(Order)
    dump, validate = adapter.dump_python, adapter.validate_python
    rows = numbered(ROWS)
    rows_adapter = TypeAdapter(list[Order])
    yaml_dump, yaml_load = _yaml()

    # name: (codec, payload, raw encode, raw decode, operations per round)
    formats: dict[str, tuple[Any, Any, Callable[[], bytes], Callable[[bytes], Any], int]] = {
        "MsgpackCodec": (
            MsgpackCodec(Order),
            ORDER,
            lambda: ormsgpack.packb(dump(ORDER, by_alias=True), option=_OPTIONS),
            lambda data: validate(ormsgpack.unpackb(data, option=_READ)),
            n,
        ),
        "YamlCodec": (
            YamlCodec(Order),
            ORDER,
            lambda: yaml_dump(dump(ORDER, by_alias=True)),
            lambda data: validate(yaml_load(data)),
            max(n // 50, 10),
        ),
        "TomlCodec": (
            TomlCodec(Order),
            ORDER,
            lambda: tomli_w.dumps(dump(ORDER, by_alias=True)).encode(),
            lambda data: validate(tomllib.loads(data.decode())),
            max(n // 10, 10),
        ),
        "XmlCodec": (
            XmlCodec(Order),
            ORDER,
            lambda: _xml_dump(dump(ORDER, by_alias=True)),
            lambda data: validate({child.tag: child.text for child in fromstring(data)}),
            max(n // 10, 10),
        ),
        "CsvCodec": (
            CsvCodec(Order),
            rows,
            lambda: _csv_dump(rows_adapter.dump_python(rows, by_alias=True)),
            lambda data: rows_adapter.validate_python(_csv_load(data)),
            max(n // 200, 5),
        ),
    }
    tables = []
    for name, (codec, payload, raw_encode, raw_decode, ops) in formats.items():
        data = codec.encode(payload)
        raw_data = raw_encode()
        writer, reader = LIBRARIES[name]

        expected_id = payload[0].id if isinstance(payload, list) else payload.id

        def check(value: Any, expected_id: str = expected_id) -> bool:
            first = value[0] if isinstance(value, list) else value
            return bool(first.id == expected_id)

        encode = codec.encode
        decode = codec.decode
        tables.append(
            Table(
                key(name, "encode"),
                f"{name}.encode: {'100 rows of ' if name == 'CsvCodec' else ''}the 10-field "
                f"model, {len(data)} bytes",
                interleave(
                    {
                        f"raw {writer}": _times(ops, lambda r=raw_encode, d=raw_data: r() == d),
                        f"{name}.encode": _times(
                            ops, lambda e=encode, p=payload, d=data: e(p) == d
                        ),
                    },
                    rounds,
                    expected=ops,
                ),
                f"raw {writer}",
                note="raw: TypeAdapter.dump_python, then the library",
            )
        )
        decoding = {
            f"raw {reader}": _times(ops, lambda r=raw_decode, d=raw_data: check(r(d))),
            f"{name}.decode": _times(ops, lambda f=decode, d=data: check(f(d))),
        }
        if name == "MsgpackCodec":
            decoding["raw msgpack"] = _times(
                ops,
                lambda d=raw_data: check(
                    validate(msgpack.unpackb(d, timestamp=3, strict_map_key=False))
                ),
            )
        tables.append(
            Table(
                key(name, "decode"),
                f"{name}.decode: the same",
                interleave(decoding, rounds, expected=ops),
                f"raw {reader}",
                note="raw: the library, then TypeAdapter.validate_python",
            )
        )
    return tables
