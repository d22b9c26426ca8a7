#!/usr/bin/env python3
"""Writes the seed corpora of the boot part's fuzz targets (valid records, a few near misses) under
tests/fuzz/corpus/<target>/. The layouts mirror src/common/shm_segment.h, src/shm/spsc_ring.h and
src/bootstrap/{bootstrap,records}.h; rerun after changing one of them."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MAGIC = 0x31534B4E494C5250
HDR = 4096


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def seg_header(payload, magic=MAGIC):
    return struct.pack("<QQiiQQ", magic, payload, 4242, 0, 987654, 7)


# segment_header: <u64 file size><header bytes>
put("segment_header", "valid_100", struct.pack("<Q", HDR + 100) + seg_header(100))
put("segment_header", "valid_0", struct.pack("<Q", HDR) + seg_header(0))
put("segment_header", "size_mismatch", struct.pack("<Q", HDR + 99) + seg_header(100))
put("segment_header", "bad_magic", struct.pack("<Q", HDR + 100) + seg_header(100, 0x1234))
put("segment_header", "name_valid", b"pl_t-test-1-0_1a2b3c4d_5e6f7a8b_r1_m3")
put("segment_header", "name_traversal", b"pl_x/../../etc/passwd")

# spsc_ring: <cap selector><ring memory: tail(64) head(64) capacity(8)+pad(56) slots><ops>
def ring(cap_log2, tail, head, msgs, ops):
    cap = 1 << cap_log2
    hdr = struct.pack("<Q", tail) + b"\0" * 56 + struct.pack("<Q", head) + b"\0" * 56
    hdr += struct.pack("<Q", cap) + b"\0" * 56
    slots = b""
    for i in range(cap):
        m = msgs[i] if i < len(msgs) else (0, 0, 0, 0, 0, 0, 0, 0, 0)
        slots += struct.pack("<IIQQQQQQQ", *m)
    return bytes([0x80 | cap_log2]) + hdr + slots + bytes(ops)


msg = (1, 9, 1, 0, 64, 1, 0, 0, 0)
put("spsc_ring", "two_pending", ring(3, 2, 0, [msg, msg], [0, 0, 0, 2, 2, 0]))
put("spsc_ring", "empty_push_pop", ring(2, 0, 0, [], [2, 2, 2, 2, 2, 0, 0, 0, 0, 0]))
put("spsc_ring", "corrupt_tail", ring(3, 1 << 40, 0, [msg], [0, 3, 0]))

# boot_records: <world><rank><record>; RankSlot = state u32, pid i32, start u64, barrier count u64,
# padded to 64 bytes; layout header = world size u32, layout version u32 (bootstrap::kLayoutVersion)
slot = struct.pack("<IiQQ", 1, 1234, 5555, 3).ljust(64, b"\0")
put("boot_records", "slot_joined", bytes([2, 1]) + slot)
put("boot_records", "slot_empty", bytes([2, 0]) + b"\0" * 64)
put("boot_records", "slot_left_bad_pid", bytes([2, 1]) + struct.pack("<IiQQ", 2, 0, 5555, 3).ljust(64, b"\0"))
put("boot_records", "layout_header", bytes([2, 0]) + struct.pack("<IIQ", 2, 4, 12345))
put("boot_records", "layout_header_old", bytes([2, 0]) + struct.pack("<IIQ", 2, 3, 12345))
# failure record (the same bytes, read by parse_failure): state u32, dead rank i32, dead pid i32,
# seen by i32, when u64 (clock ticks since boot)
put("boot_records", "failure_recorded", bytes([3, 0]) + struct.pack("<IiiiQ", 2, 1, 4321, 0, 777).ljust(64, b"\0"))
put("boot_records", "failure_self_seen", bytes([3, 0]) + struct.pack("<IiiiQ", 2, 1, 4321, 1, 777).ljust(64, b"\0"))
