#!/usr/bin/env python3
"""Writes the seed corpora of the collectives' fuzz targets, little endian:
- coll_setup/ (tests/fuzz/coll_setup_fuzz.cpp): valid collectives setup records
  (src/collectives/setup_record.h, 296 bytes) of rank 1 in a 2-rank job, host and GPU, and a few
  near misses;
- window_record/ (tests/fuzz/window_record_fuzz.cpp): a selector byte (rank | (id - 1) << 3) and a
  window registration record (src/collectives/window_record.h, 144 bytes): valid host and GPU
  records, unexported ones, and near misses.
Run from the repository root; the seeds are committed."""
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "coll_setup"
WIN_OUT = Path(__file__).resolve().parent / "window_record"
MAGIC, VERSION = 0x504C4352, 3
FLAG_BYTES = 2 * 160 * 8 * 8 + 160 * 8 + 4 + 15 * 4  # sizeof(FlagArea)
CAP = 1 << 20


def data_bytes(world, ll_cap, ll128_cap):
    region = world * CAP
    raw = 2 * (2 * region) + 2 * world * ll_cap
    if not ll128_cap:
        return raw
    return (raw + 127) // 128 * 128 + 2 * world * ll128_cap


def handle(kind, alloc_bytes, name=b""):
    # kind u32, owner_pid i32, owner_start u64, alloc_id u64, alloc_bytes u64, owner_base u64, data[64]
    return struct.pack("<Iiqqqq64s", kind, 4242, 1, 7, alloc_bytes, 0x7F0000000000, name)


def record(host, rank=1, world=2, flags_off=0, data_off=0, extra=0, kind=None, magic=MAGIC):
    ll_cap = 0 if host else CAP
    ll128_cap = 0 if host else CAP
    k = kind if kind is not None else (1 if host else 2)
    name = b"pl_seed_m1\0" if host else b"\x11" * 64
    links = 0 if host else 1
    head = struct.pack("<IIiiiiQQQQQ", magic, VERSION, rank, world, 1 if host else 0, links, CAP, ll_cap, ll128_cap,
                       flags_off, data_off)
    # sm_count i32, grid_max i32, process u64, device i32, reserved i32
    grid = struct.pack("<iiQii", 0 if host else 132, 160, 7, -1 if host else 0, 0)
    return (head + handle(k, FLAG_BYTES + flags_off, name) +
            handle(k, data_bytes(world, ll_cap, ll128_cap) + data_off + extra, name) + grid)


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
        assert name == "short" or len(blob) == 296, (name, len(blob))
        (OUT / name).write_bytes(blob)
    window_seeds()


WIN_MAGIC, WIN_VERSION = 0x504C5752, 1
WIN_ALLOC = 1 << 20


def window_record(rank=1, win_id=3, exported=1, nbytes=4096, offset=8192, kind=None, alloc=WIN_ALLOC, host=True,
                  magic=WIN_MAGIC, version=WIN_VERSION):
    # magic u32, version u32, rank i32, exported i32, id u64, bytes u64, offset u64, MemHandle
    k = kind if kind is not None else ((1 if host else 2) if exported else 0)
    name = (b"pl_seed_m1\0" if host else b"\x11" * 64) if exported else b""
    head = struct.pack("<IIiiQQQ", magic, version, rank, exported, win_id, nbytes, offset)
    h = handle(k, alloc, name) if exported or kind is not None else struct.pack("<Iiqqqq64s", 0, 0, 0, 0, 0, 0, b"")
    return head + h


def window_seeds():
    WIN_OUT.mkdir(parents=True, exist_ok=True)
    sel = bytes([1 | (2 << 3)])  # sender rank 1, expected window id 3
    seeds = {
        "valid_host": window_record(),
        "valid_host_fd": window_record(kind=3),
        "valid_gpu": window_record(host=False),
        "valid_gpu_vmm": window_record(host=False, kind=4),
        "valid_whole_alloc": window_record(offset=0, nbytes=WIN_ALLOC),
        "unexported": window_record(exported=0, offset=0, nbytes=100),
        "unexported_with_handle": window_record(exported=0, kind=1),
        "past_alloc": window_record(offset=WIN_ALLOC - 4095),
        "offset_wraps": window_record(offset=(1 << 64) - 16),
        "zero_alloc": window_record(alloc=0),
        "zero_bytes": window_record(nbytes=0),
        "wrong_kind": window_record(kind=2),
        "wrong_rank": window_record(rank=0),
        "wrong_id": window_record(win_id=4),
        "exported_2": window_record(exported=2, kind=1),
        "bad_magic": window_record(magic=0),
        "bad_version": window_record(version=2),
    }
    for name, blob in seeds.items():
        assert len(blob) == 144, (name, len(blob))
        (WIN_OUT / name).write_bytes(sel + blob)
    (WIN_OUT / "short").write_bytes(sel + window_record()[:100])


if __name__ == "__main__":
    main()
