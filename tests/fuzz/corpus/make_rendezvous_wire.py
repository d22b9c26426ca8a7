#!/usr/bin/env python3
"""Writes the seeds of tests/fuzz/rendezvous_wire_fuzz.cpp under tests/fuzz/corpus/rendezvous_wire/:
valid messages of each kind and near misses. The layouts mirror src/hier/rendezvous_wire.h (little
endian); rerun after changing it. Each file starts with the target's selector byte: low 3 bits the
parser (0 hello, 1 header, 2 table, 3 failure, 4 status, 5 verdict), next 3 bits nranks - 1."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rendezvous_wire")
MAGIC, VERSION, NAME = 0x56524C50, 1, 64


def put(name, which, nranks, data):
    os.makedirs(ROOT, exist_ok=True)
    with open(os.path.join(ROOT, name), "wb") as f:
        f.write(bytes([which | ((nranks - 1) << 3)]) + data)


def name(s):
    b = s.encode()[:NAME - 1]
    return b + bytes(NAME - len(b))


def text(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def hello(rank, nranks):
    h = struct.pack("<IHH", MAGIC, VERSION, 1) + bytes(range(16)) + struct.pack("<iiQQI", rank, nranks, 7, 9, 1234)
    h += name("node-a") + name("host-a.example") + struct.pack("<Q", 1 << 20)  # names, plan threshold
    return h + bytes(192 - len(h))


put("hello", 0, 1, hello(1, 4))
put("hello_rank_out", 0, 1, hello(4, 4))
put("hello_short", 0, 1, hello(1, 4)[:100])
put("header_table", 1, 1, struct.pack("<IHHI", MAGIC, VERSION, 2, 344))
put("header_huge", 1, 1, struct.pack("<IHHI", MAGIC, VERSION, 2, 0x7FFFFFFF))
put("header_kind", 1, 1, struct.pack("<IHHI", MAGIC, VERSION, 9, 4))


def table(node_of, hosts):
    b = struct.pack("<II", len(node_of), len(hosts)) + b"".join(struct.pack("<I", n) for n in node_of)
    return b + b"".join(struct.pack("<QQ", h, 5) + name("n%d" % i) for i, h in enumerate(hosts))


put("table_2x2", 2, 4, table([0, 0, 1, 1], [10, 11]))
put("table_rr", 2, 4, table([0, 1, 0, 1], [10, 11]))
put("table_order", 2, 4, table([1, 1, 0, 0], [10, 11]))
put("table_dup_host", 2, 4, table([0, 0, 1, 1], [10, 10]))
put("failure", 3, 1, struct.pack("<I", 2) + text("ranks 1 of 2 did not reach the rendezvous"))
put("failure_code", 3, 1, struct.pack("<I", 9) + text("x"))
put("status_ok", 4, 4, struct.pack("<iI", 3, 4) + text(""))
put("status_err", 4, 4, struct.pack("<iI", 2, 2) + text("timed out"))
put("verdict", 5, 4, struct.pack("<I", 2) + struct.pack("<iI", 1, 1) + text("a") + struct.pack("<iI", 3, 3) + text("b"))
put("verdict_many", 5, 2, struct.pack("<I", 3))
