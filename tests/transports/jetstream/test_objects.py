"""The Object store: round trips, metadata, replacement, watch, interop, digests, errors."""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import DigestMismatchError, ObjectNotFoundError

from goflux import (
    BucketNotFound,
    DecodeError,
    DigestMismatch,
    EncodeError,
    InvalidKey,
    JsonCodec,
    ObjectNotFound,
    PublishError,
)
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports.jetstream import StreamFeatureDisabled
from tests.models import Customer, Order

ROOT = Path(__file__).resolve().parents[3]
KIB = 1024
MIB = 1024 * KIB
DATA = bytes(range(256)) * 1300  # 332,800 bytes: three chunks of 128 KiB, the last short


def sha(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def stream_messages(js: JetStreamContext, bucket: str) -> int:
    info = await js.stream_info(f"OBJ_{bucket}")
    return info.state.messages


async def chunk_sequences(js: JetStreamContext, bucket: str, nuid: str) -> list[int]:
    info = await js.stream_info(f"OBJ_{bucket}", subjects_filter=f"$O.{bucket}.C.{nuid}")
    found = []
    seq = 0
    for _ in range(info.state.subjects[f"$O.{bucket}.C.{nuid}"] if info.state.subjects else 0):
        msg = await js.get_msg(f"OBJ_{bucket}", seq + 1, subject=f"$O.{bucket}.C.{nuid}", next=True)
        assert msg.seq is not None
        seq = msg.seq
        found.append(seq)
    return found


async def read_into(store: jetstream.ObjectStore, name: str, read: list[bytes]) -> None:
    async with store.open(name) as reader:
        async for chunk in reader:
            read.append(chunk)  # noqa: PERF401 - kept when the loop fails


@pytest.fixture
async def store(bare_js: JetStreamContext) -> jetstream.ObjectStore:
    return await jetstream.object_store(bare_js, "files")


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bytes", "file", "async iterator"])
async def test_put_and_get_round_trip(store: jetstream.ObjectStore, kind: str) -> None:
    source: object = {
        "bytes": DATA,
        "file": io.BytesIO(DATA),
        "async iterator": pieces(DATA, 1000),  # gathered into 128 KiB chunks
    }[kind]
    info = await store.put("report.bin", source)  # type: ignore[arg-type]
    assert (info.name, info.bucket, info.size, info.chunks) == ("report.bin", "files", len(DATA), 3)
    assert info.digest == sha(DATA)
    assert await store.get("report.bin") == DATA


async def test_put_reads_a_real_file_in_chunks(
    store: jetstream.ObjectStore, tmp_path: Path
) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    with path.open("rb") as file:
        info = await store.put("data.bin", file, chunk_size=100 * KIB)
    assert info.chunks == 4
    async with store.open("data.bin") as reader:
        chunks = [chunk async for chunk in reader]
    assert [len(c) for c in chunks] == [100 * KIB] * 3 + [len(DATA) - 300 * KIB]
    assert b"".join(chunks) == DATA


async def test_an_empty_object(store: jetstream.ObjectStore) -> None:
    info = await store.put("empty", b"")
    assert (info.size, info.chunks, info.digest) == (0, 0, sha(b""))
    assert await store.get("empty") == b""


async def test_meta_headers_and_description_round_trip(store: jetstream.ObjectStore) -> None:
    await store.put(
        "a/b c.txt",
        b"hello",
        meta={"owner": "ops"},
        headers={"Content-Type": "text/plain", "X-Tags": ["a", "b"]},
        description="a greeting",
    )
    info = await store.info("a/b c.txt")
    assert info.meta == {"owner": "ops"}
    assert info.headers == {"Content-Type": ("text/plain",), "X-Tags": ("a", "b")}
    assert info.description == "a greeting"
    assert (info.size, info.chunks, info.digest, info.deleted) == (5, 1, sha(b"hello"), False)
    assert info.mtime.tzinfo is not None
    assert info.chunk_size == 128 * KIB


async def test_typed_values(store: jetstream.ObjectStore) -> None:
    order = Order(id="o-1", customerId="c-1", amount=9.5, lines=["x"])
    await store.put_value("order", order, JsonCodec(Order))
    assert await store.get_value("order", JsonCodec(Order)) == order
    with pytest.raises(DecodeError, match=r"'files'.*'order'"):
        await store.get_value("order", JsonCodec(Customer))
    with pytest.raises(EncodeError):
        await store.put_value("bad", "not an order", JsonCodec(Order))  # type: ignore[misc]
    with pytest.raises(ObjectNotFound):
        await store.info("bad")


async def test_list_shows_live_objects_by_name(store: jetstream.ObjectStore) -> None:
    assert await store.list() == []
    for name in ("b", "a", "c"):
        await store.put(name, name.encode())
    await store.delete("b")
    assert [i.name for i in await store.list()] == ["a", "c"]
    listed = await store.list(deleted=True)
    assert [(i.name, i.deleted) for i in listed] == [("a", False), ("b", True), ("c", False)]


async def test_a_meta_message_that_does_not_read_hides_no_other_object(
    store: jetstream.ObjectStore, bare_js: JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("a", "c"):
        await store.put(name, name.encode())
    # Another tool wrote a meta message that is not an object's meta JSON.
    await bare_js.publish("$O.files.M.YmFk", b"{not json")
    await bare_js.publish("$O.files.M.aW5m", b'{"name": "inf", "size": 1e999}')
    listed = await store.list()
    assert [i.name for i in listed] == ["a", "c"]
    assert [(bad.bucket, bad.subject) for bad in listed.invalid] == [
        ("files", "$O.files.M.YmFk"),
        ("files", "$O.files.M.aW5m"),
    ]
    assert isinstance(listed.invalid[0].error, DecodeError)
    assert "listing bucket 'files': skipped '$O.files.M.YmFk'" in caplog.text
    with pytest.raises(DecodeError, match="not an object's meta JSON"):
        await store.list(strict=True)
    again = (await store.list(deleted=True)).invalid
    assert [bad[:3] for bad in again] == [bad[:3] for bad in listed.invalid]


async def test_delete_marks_deleted_and_purges_chunks(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    info = await store.put("doomed", DATA)
    gone = await store.delete("doomed")
    assert (gone.deleted, gone.size, gone.chunks) == (True, 0, 0)
    with pytest.raises(ObjectNotFound) as caught:
        await store.get("doomed")
    assert (caught.value.bucket, caught.value.name) == ("files", "doomed")
    with pytest.raises(ObjectNotFound):
        await store.info("doomed")
    with pytest.raises(ObjectNotFound):
        await store.delete("doomed")
    assert (await store.info("doomed", deleted=True)).deleted
    assert await chunk_sequences(bare_js, "files", info.nuid) == []
    assert await stream_messages(bare_js, "files") == 1  # the deletion marker only


async def test_replacing_an_object_leaves_only_the_new_chunks(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    first = await store.put("doc", DATA)
    second = await store.put("doc", DATA[:1000])
    assert first.nuid != second.nuid
    assert await chunk_sequences(bare_js, "files", first.nuid) == []
    assert len(await chunk_sequences(bare_js, "files", second.nuid)) == 1
    assert await stream_messages(bare_js, "files") == 2  # one chunk, one meta message
    assert await store.get("doc") == DATA[:1000]


async def test_a_failed_put_leaves_nothing_behind(bare_js: JetStreamContext) -> None:
    small = await jetstream.object_store(bare_js, "small", max_bytes=MIB)
    await small.put("kept", b"old")
    with pytest.raises(PublishError):
        await small.put("kept", bytes(3 * MIB))  # the bucket fills up part way
    assert await small.get("kept") == b"old"
    with pytest.raises(PublishError):
        await small.put("new", bytes(3 * MIB))
    with pytest.raises(ObjectNotFound):
        await small.info("new")
    assert await stream_messages(bare_js, "small") == 2  # "kept": its chunk and meta


async def test_watch_sees_puts_and_deletes(store: jetstream.ObjectStore) -> None:
    await store.put("before", b"0")
    async with store.watch() as watch:
        async with asyncio.timeout(10):
            first = await anext(watch)
            await store.put("x", b"1")
            await store.put("y", b"22")
            await store.delete("x")
            seen = [await anext(watch) for _ in range(3)]
    assert (first.name, first.size) == ("before", 1)
    assert [(i.name, i.size, i.deleted) for i in seen] == [
        ("x", 1, False),
        ("y", 2, False),
        ("x", 0, True),
    ]


async def test_watch_updates_only_and_ignore_deletes(store: jetstream.ObjectStore) -> None:
    await store.put("old", b"0")
    async with store.watch(updates_only=True, ignore_deletes=True) as watch:
        async with asyncio.timeout(10):
            await store.delete("old")
            await store.put("new", b"1")
            assert (await anext(watch)).name == "new"


async def test_breaking_out_of_open_removes_its_subscription(
    store: jetstream.ObjectStore, nc: Client
) -> None:
    await store.put("big", DATA)
    before = len(nc._subs)
    async with store.open("big", window_bytes=128 * KIB) as reader:
        async for _ in reader:
            assert len(nc._subs) == before + 1
            break
    assert len(nc._subs) == before


# -- interop with nats-py's object store ---------------------------------------------------


async def test_nats_py_reads_what_goflux_wrote(bare_js: JetStreamContext) -> None:
    store = await jetstream.object_store(bare_js, "shared", description="both")
    await store.put("from-goflux", DATA, description="hi")
    theirs = await bare_js.object_store("shared")
    result = await theirs.get("from-goflux")
    assert result.data == DATA
    assert result.info.digest == sha(DATA)
    assert (result.info.size, result.info.chunks, result.info.description) == (len(DATA), 3, "hi")
    await store.put("second", b"2")
    assert sorted(i.name for i in await theirs.list()) == ["from-goflux", "second"]
    await store.delete("from-goflux")
    with pytest.raises(ObjectNotFoundError):
        await theirs.get_info("from-goflux")
    config = (await bare_js.stream_info("OBJ_shared")).config
    assert config.subjects == ["$O.shared.C.>", "$O.shared.M.>"]
    assert (config.allow_rollup_hdrs, config.allow_direct, config.discard) == (True, True, "new")


async def test_goflux_reads_what_nats_py_wrote(bare_js: JetStreamContext) -> None:
    theirs = await bare_js.create_object_store("natspy")
    await theirs.put("from-nats-py", DATA)
    store = await jetstream.object_store(bare_js, "natspy", create=False)
    assert await store.get("from-nats-py") == DATA
    info = await store.info("from-nats-py")
    assert (info.size, info.chunks, info.digest) == (len(DATA), 3, sha(DATA))
    # goflux replaces it; nats-py sees the new version, and the old chunks are gone
    await store.put("from-nats-py", b"replaced")
    assert (await theirs.get("from-nats-py")).data == b"replaced"
    assert await stream_messages(bare_js, "natspy") == 2
    # binding with goflux's settings leaves nats-py's bucket as it is
    await jetstream.object_store(bare_js, "natspy")
    assert (await theirs.get("from-nats-py")).data == b"replaced"


# -- corruption and errors ------------------------------------------------------------------


async def test_a_replaced_chunk_raises_digest_mismatch(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    info = await store.put("victim", DATA)
    subject = f"$O.files.C.{info.nuid}"
    middle = (await chunk_sequences(bare_js, "files", info.nuid))[1]
    await bare_js.delete_msg("OBJ_files", middle)
    await bare_js.publish(subject, b"x" * (128 * KIB))  # same size, wrong bytes, last
    with pytest.raises(DigestMismatch) as caught:
        await store.get("victim")
    error = caught.value
    assert (error.bucket, error.name, error.expected) == ("files", "victim", sha(DATA))
    assert error.actual.startswith("SHA-256=")
    assert error.actual != error.expected
    assert error.expected in str(error)
    assert error.actual in str(error)
    theirs = await bare_js.object_store("files")
    with pytest.raises(DigestMismatchError):  # nats-py agrees
        await theirs.get("victim")


async def test_a_missing_chunk_raises_digest_mismatch_at_the_end_of_open(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    info = await store.put("victim", DATA)
    last = (await chunk_sequences(bare_js, "files", info.nuid))[-1]
    await bare_js.delete_msg("OBJ_files", last)
    read: list[bytes] = []
    with pytest.raises(DigestMismatch, match="victim"):
        await read_into(store, "victim", read)
    assert b"".join(read) == DATA[: 256 * KIB]  # the chunks came before the error


async def test_a_meta_with_a_wrong_digest_raises_digest_mismatch(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    info = await store.put("victim", b"the right bytes")
    subject = "$O.files.M." + base64.urlsafe_b64encode(b"victim").decode()
    msg = await bare_js.get_last_msg("OBJ_files", subject)
    assert msg.data is not None
    meta = json.loads(msg.data)
    meta["digest"] = sha(b"other bytes")
    await bare_js.publish(subject, json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"})
    with pytest.raises(DigestMismatch) as caught:
        await store.get("victim")
    assert (caught.value.expected, caught.value.actual) == (sha(b"other bytes"), info.digest)


async def test_missing_objects_raise_object_not_found(store: jetstream.ObjectStore) -> None:
    with pytest.raises(ObjectNotFound, match=r"'nope'.*'files'"):
        await store.info("nope")
    with pytest.raises(ObjectNotFound):
        await store.get("nope")
    with pytest.raises(KeyError):  # ObjectNotFound is a KeyError too
        await store.delete("nope")
    with pytest.raises(ObjectNotFound):
        async with store.open("nope"):
            pass


async def test_missing_buckets_raise_bucket_not_found(bare_js: JetStreamContext) -> None:
    with pytest.raises(BucketNotFound) as caught:
        await jetstream.object_store(bare_js, "nowhere", create=False)
    assert caught.value.bucket == "nowhere"
    store = await jetstream.object_store(bare_js, "doomed")
    await store.put("x", b"1")
    await bare_js.delete_stream("OBJ_doomed")
    with pytest.raises(BucketNotFound):
        await store.info("x")
    with pytest.raises(BucketNotFound):
        await store.get("x")
    with pytest.raises(BucketNotFound):
        await store.put("x", b"2")
    with pytest.raises(BucketNotFound):
        await store.list()
    with pytest.raises(BucketNotFound):
        async with store.watch():
            pass
    unbound = jetstream.ObjectStore(bare_js, "never")
    with pytest.raises(BucketNotFound):
        await unbound.delete("x")


async def test_invalid_names_raise_invalid_key(
    store: jetstream.ObjectStore, bare_js: JetStreamContext
) -> None:
    with pytest.raises(InvalidKey):
        await store.put("", b"x")
    with pytest.raises(InvalidKey):
        await store.get("")
    with pytest.raises(InvalidKey):
        await store.info("")
    with pytest.raises(InvalidKey):
        await store.delete("")
    with pytest.raises(InvalidKey):
        store.open("")
    with pytest.raises(InvalidKey):
        await jetstream.object_store(bare_js, "bad.bucket")
    with pytest.raises(TypeError):
        await store.put("text", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        await store.put("x", b"x", chunk_size=0)


# -- a large object, measured in a process of its own ------------------------------------

MEASURE = textwrap.dedent(
    """
    import asyncio, hashlib, resource, sys, time
    import nats
    from goflux.transports import jetstream

    def status_kib(field):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise LookupError(field)

    def reset_peak():
        # The peak so far (imports, connecting) would hide any growth below it: reset
        # the kernel's high-water mark (Linux 4.0+), so the peak is this run's own.
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")

    async def main(url, path):
        nc = await nats.connect(url)
        store = await jetstream.object_store(nc.jetstream(), "large")
        reset_peak()
        base = status_kib("VmRSS")
        maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        with open(path, "rb") as file:
            info = await store.put("large.bin", file)
        put_s = time.perf_counter() - start
        after_put = status_kib("VmHWM")
        digest, size = hashlib.sha256(), 0
        start = time.perf_counter()
        async with store.open("large.bin") as reader:
            async for chunk in reader:
                digest.update(chunk)
                size += len(chunk)
        get_s = time.perf_counter() - start
        peak = status_kib("VmHWM")
        maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        await nc.close()
        print(info.size, info.chunks, info.digest, size, digest.hexdigest(), put_s, get_s,
              base, after_put, peak, maxrss_before, maxrss_after)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.slow
@pytest.mark.timeout(180)  # above the child's 120 s and the 200 MiB written before it
async def test_a_200_mib_object_streams_in_bounded_memory(
    nats_server: NatsServer, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    path = tmp_path / "large.bin"
    expected = hashlib.sha256()
    with path.open("wb") as file:
        for _ in range(200):
            block = os.urandom(MIB)
            expected.update(block)
            file.write(block)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", MEASURE, nats_server.url, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    fields = result.stdout.split()
    size, chunks, stored_digest, read = int(fields[0]), int(fields[1]), fields[2], int(fields[3])
    read_hex, put_s, get_s = fields[4], float(fields[5]), float(fields[6])
    base, after_put, peak, maxrss_before, maxrss_after = (int(v) for v in fields[7:12])
    growth_mib = (peak - base) / KIB
    numbers = {
        "size_mib": size / MIB,
        "chunks": chunks,
        "put_mib_per_s": round(size / MIB / put_s, 1),
        "get_mib_per_s": round(size / MIB / get_s, 1),
        "rss_base_mib": round(base / KIB, 1),
        "rss_after_put_mib": round(after_put / KIB, 1),
        "rss_peak_mib": round(peak / KIB, 1),
        "rss_growth_mib": round(growth_mib, 1),
        "ru_maxrss_before_mib": round(maxrss_before / KIB, 1),
        "ru_maxrss_after_mib": round(maxrss_after / KIB, 1),
    }
    for key, value in numbers.items():
        record_property(key, value)
    print("200 MiB object:", numbers)
    assert size == read == 200 * MIB
    assert chunks == 1600
    assert read_hex == expected.hexdigest()
    assert stored_digest == sha_of_hex(expected.hexdigest())
    assert growth_mib < 64


def sha_of_hex(hexdigest: str) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).decode()


async def test_a_name_too_long_for_a_subject_is_refused_before_anything_is_sent(
    nc: Client, bare_js: JetStreamContext
) -> None:
    store = await jetstream.object_store(bare_js, "files")
    with pytest.raises(InvalidKey, match="too long"):
        await store.put("x" * 3500, b"data")
    assert nc.is_connected  # the server would have closed it over the subject
    assert await stream_messages(bare_js, "files") == 0
    await store.put("x" * 1500, b"data")  # long, but fits
    assert await store.get("x" * 1500) == b"data"


async def test_concurrent_puts_of_one_name_leave_no_chunks_behind(
    bare_js: JetStreamContext,
) -> None:
    store = await jetstream.object_store(bare_js, "files")
    data = os.urandom(100_000)
    await store.put("same", data, chunk_size=25_000)
    await asyncio.gather(*(store.put("same", data, chunk_size=25_000) for _ in range(5)))
    info = await store.info("same")
    assert await stream_messages(bare_js, "files") == info.chunks + 1  # its chunks, one meta
    assert await store.get("same") == data
    await asyncio.gather(store.delete("same"), store.put("same", data, chunk_size=25_000))
    live = await store.list()
    expected = sum(i.chunks for i in live) + 1
    assert await stream_messages(bare_js, "files") == expected


async def test_a_reader_dropped_unclosed_leaves_no_subscription(
    nc: Client, bare_js: JetStreamContext
) -> None:
    store = await jetstream.object_store(bare_js, "files")
    await store.put("big", os.urandom(1_000_000), chunk_size=50_000)
    before = len(nc._subs)

    async def first_chunk() -> bytes:
        reader = store.open("big", window_bytes=100_000)
        return await anext(reader)  # dropped here, never closed

    assert len(await first_chunk()) == 50_000
    gc.collect()
    async with asyncio.timeout(10):
        while len(nc._subs) > before:
            await nc.flush()


async def test_a_bucket_without_direct_gets_names_the_setting(bare_js: JetStreamContext) -> None:
    store = await jetstream.object_store(bare_js, "files")
    await store.put("doc", DATA)
    info = await bare_js.stream_info("OBJ_files")
    info.config.allow_direct = False  # turned off by hand: the chunks read with direct gets
    await bare_js.update_stream(info.config)
    with pytest.raises(StreamFeatureDisabled, match=r"'doc' of bucket 'files'.*allow_direct") as e:
        await store.get("doc")
    assert (e.value.stream, e.value.setting) == ("OBJ_files", "allow_direct")
    assert (await store.info("doc")).size == len(DATA)  # the meta message still reads


async def test_a_bucket_deleted_while_being_read_is_bucket_not_found(
    bare_js: JetStreamContext,
) -> None:
    store = await jetstream.object_store(bare_js, "files")
    await store.put("doc", os.urandom(1_000_000), chunk_size=50_000)
    async with store.open("doc", window_bytes=100_000) as reader:
        await anext(reader)
        await bare_js.delete_stream("OBJ_files")

        async def rest() -> None:
            async for _ in reader:
                pass

        with pytest.raises(BucketNotFound, match="the bucket's stream is gone") as caught:
            await rest()
    assert caught.value.bucket == "files"


async def test_an_object_replaced_while_being_read_says_so(bare_js: JetStreamContext) -> None:
    store = await jetstream.object_store(bare_js, "files")
    await store.put("doc", os.urandom(2_000_000), chunk_size=50_000)
    async with store.open("doc", window_bytes=100_000) as reader:
        await anext(reader)
        await store.put("doc", b"new version")  # the old chunks are purged

        async def rest() -> None:
            async for _ in reader:
                pass

        with pytest.raises(ObjectNotFound, match="replaced while being read"):
            await rest()
    assert await store.get("doc") == b"new version"


async def test_listing_leaves_no_consumer_behind(bare_js: JetStreamContext) -> None:
    store = await jetstream.object_store(bare_js, "files")
    for n in range(3):
        await store.put(f"f{n}", b"x")
    await store.delete("f1")
    for _ in range(5):
        assert [i.name for i in await store.list()] == ["f0", "f2"]
    assert [i.name for i in await store.list(deleted=True)] == ["f0", "f1", "f2"]
    assert await bare_js.consumers_info("OBJ_files") == []
