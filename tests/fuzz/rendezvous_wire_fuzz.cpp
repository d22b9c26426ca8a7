// libFuzzer target: the multi-node rendezvous's messages (src/hier/rendezvous_wire.h), which come
// from the network. Input: one selector byte (which parser, and the reader's nranks 1..8), then the
// raw bytes. Every parser must return a reason or a value that keeps its promises (ranks in range,
// tables whose nodes appear in order of first rank, texts within their bound), and a value it
// accepts must encode back to the same bytes; never crash, read past the input or overflow (ASan +
// UBSan). Seeds: tests/fuzz/corpus/rendezvous_wire/ (valid messages of each kind and near misses),
// made by tests/fuzz/corpus/make_rendezvous_wire.py.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "hier/rendezvous_wire.h"

using namespace peerlink::hier;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] & 7;
  const int nranks = ((data[0] >> 3) & 7) + 1;
  ++data;
  --size;
  switch (which) {
    case 0: {
      Hello h;
      if (!parse_hello(data, size, &h).empty()) break;
      if (h.rank < 0 || h.rank >= h.nranks || h.nranks > kMaxWireRanks) std::abort();
      if (h.name.size() >= kNameBytes || h.hostname.size() >= kNameBytes) std::abort();
      break;
    }
    case 1: {
      Kind k;
      uint32_t len = 0;
      if (parse_header(data, size, &k, &len).empty() && len > kMaxBody) std::abort();
      break;
    }
    case 2: {
      Table t;
      if (!parse_table(data, size, nranks, &t).empty()) break;
      if (t.node_of.size() != static_cast<size_t>(nranks) || t.nodes.empty()) std::abort();
      uint32_t next = 0;
      for (uint32_t n : t.node_of) {
        if (n > next || n >= t.nodes.size()) std::abort();
        if (n == next) ++next;
      }
      if (encode_table(t).size() != size) std::abort();  // accepted bytes are exactly one table
      break;
    }
    case 3: {
      Failure f;
      if (parse_failure(data, size, &f).empty() && f.message.size() > kMaxMessage) std::abort();
      break;
    }
    case 4: {
      Status s;
      if (!parse_status(data, size, nranks, &s).empty()) break;
      if (s.rank < 0 || s.rank >= nranks || s.message.size() > kMaxMessage) std::abort();
      break;
    }
    default: {
      std::vector<VerdictEntry> v;
      if (!parse_verdict(data, size, nranks, &v).empty()) break;
      if (v.size() > static_cast<size_t>(nranks)) std::abort();
      for (const VerdictEntry& e : v)
        if (e.rank < 0 || e.rank >= nranks || e.message.size() > kMaxMessage) std::abort();
      if (encode_verdict(v).size() != size) std::abort();
      break;
    }
  }
  return 0;
}
