#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/coll_setup_fuzz.cpp: valid collectives setup records
(src/collectives/setup_record.h, 264 bytes, little endian) of rank 1 in a 2-rank job, host and
GPU, and a few near misses. Run from the repository root; the seeds are committed."""
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "coll_setup"
MAGIC, VERSION = 0x504C4352, 1
FLAG_BYTES = 2 * 160 * 8 * 8 + 160 * 8 + 4 + 15 * 4  # sizeof(FlagArea)
CAP = 1 << 20


def data_bytes(world, ll_cap):
    region = world * CAP
    return 2 * (2 * region) + 2 * world * ll_cap


def handle(kind, alloc_bytes, name=b""):
    # kind u32, owner_pid i32, owner_start u64, alloc_id u64, alloc_bytes u64, owner_base u64, data[64]
    return struct.pack("<Iiqqqq64s", kind, 4242, 1, 7, alloc_bytes, 0x7F0000000000, name)


def record(host, rank=1, world=2, flags_off=0, data_off=0, extra=0, kind=None, magic=MAGIC):
    ll_cap = 0 if host else CAP
    k = kind if kind is not None else (1 if host else 2)
    name = b"pl_seed_m1\0" if host else b"\x11" * 64
    head = struct.pack("<IIiiiiQQQQ", magic, VERSION, rank, world, 1 if host else 0, 0, CAP, ll_cap, flags_off, data_off)
    return head + handle(k, FLAG_BYTES + flags_off, name) + handle(k, data_bytes(world, ll_cap) + data_off + extra, name)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    seeds = {
        "valid_host": record(True),
        "valid_gpu": record(False),
        "valid_host_offsets": record(True, flags_off=64, data_off=4096),
        "wrong_rank": record(True, rank=0),
        "wrong_kind": record(True, kind=2),
        "bad_magic": record(True, magic=0),
        "short": record(True)[:200],
    }
    for name, blob in seeds.items():
        assert name == "short" or len(blob) == 264, (name, len(blob))
        (OUT / name).write_bytes(blob)


if __name__ == "__main__":
    main()
