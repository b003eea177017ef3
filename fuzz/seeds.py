"""Seed inputs for every target: well-formed requests of every served API and version,
logins that succeed, batches in every codec. Mutations of valid inputs reach deeper than
random bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pykfk._core.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    build_batch,
    to_legacy,
)
from pykfk.protocol import API_SPECS


def _batch(codec: int) -> bytes:
    records = [(b"key-%d" % i, b"value-%d" % i * (i + 1), 1_700_000_000_000 + i, [("h", b"v")]) for i in range(5)]
    return bytes(build_batch(records, compression=codec, producer_id=7, producer_epoch=0, base_sequence=0))


def request_seeds() -> list[bytes]:
    from fuzz.targets import _FLEXIBLE_FROM, SERVED

    seeds = []
    batch = _batch(CODEC_NONE)
    for index, (key, version) in enumerate(SERVED):
        if key == 0:
            body = {"acks": 1, "timeout_ms": 1000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": batch if version >= 3 else to_legacy(batch, 1)}]}]}
        else:
            body = {}
        encoded = API_SPECS[key].encode_request(body, version)
        header_rest = b"\x00\x04fuzz" + (b"\x00" if version >= _FLEXIBLE_FROM[key] else b"")
        seeds.append(index.to_bytes(2, "big") + header_rest + encoded)
    return seeds


def sasl_seeds() -> list[bytes]:
    return [b"\x00\x00alice\x00pw", b"\x01n,,n=alice,r=abcdef\xffc=biws,r=abcdef,p=AAAA",
            b"\x02n,a=alice,n=alice,r=x\xffc=biws,r=x,p=="]


def batch_seeds() -> list[bytes]:
    plain = _batch(CODEC_NONE)
    return [plain, _batch(CODEC_GZIP), _batch(CODEC_LZ4), _batch(CODEC_ZSTD), plain + plain,
            bytes(to_legacy(plain, 0)), bytes(to_legacy(plain, 1))]


def write_seeds(corpus: Path) -> None:
    for target, seeds in (("request", request_seeds()), ("sasl", sasl_seeds()), ("batches", batch_seeds())):
        directory = corpus / target
        directory.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            (directory / f"seed-{hashlib.sha1(seed).hexdigest()[:16]}").write_bytes(seed)
