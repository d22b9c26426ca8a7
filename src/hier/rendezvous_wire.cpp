// Encodings and parsers of the rendezvous messages (rendezvous_wire.h).
#include "hier/rendezvous_wire.h"

#include <cstring>

#include "common/format.h"

namespace peerlink::hier {
namespace {

void put16(std::vector<uint8_t>& b, uint16_t v) {
  for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_name(std::vector<uint8_t>& b, const std::string& s) {
  for (size_t i = 0; i < kNameBytes; ++i) b.push_back(i + 1 < kNameBytes && i < s.size() ? static_cast<uint8_t>(s[i]) : 0);
}
void put_text(std::vector<uint8_t>& b, const std::string& s) {
  size_t n = s.size() < kMaxMessage ? s.size() : kMaxMessage;
  put32(b, static_cast<uint32_t>(n));
  b.insert(b.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
}

// A bounds-checked reader: every get fails (and stays failed) once the bytes run out.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t at = 0;
  bool ok = true;
  bool need(size_t k) {
    ok = ok && k <= n - at;  // at <= n always
    return ok;
  }
  uint64_t get(int bytes) {
    if (!need(static_cast<size_t>(bytes))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(p[at + i]) << (8 * i);
    at += static_cast<size_t>(bytes);
    return v;
  }
  // A NUL-padded name: printable ASCII up to the first NUL, at most kNameBytes - 1 characters (the
  // encoder's bound); anything else is replaced by '?'.
  std::string name() {
    if (!need(kNameBytes)) return {};
    std::string s;
    for (size_t i = 0; i + 1 < kNameBytes && p[at + i]; ++i) {
      uint8_t c = p[at + i];
      s.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
    }
    at += kNameBytes;
    return s;
  }
  // A length-prefixed text of at most kMaxMessage bytes (same replacement).
  bool text(std::string* out) {
    uint64_t len = get(4);
    if (!ok || len > kMaxMessage || !need(static_cast<size_t>(len))) return ok = false;
    out->clear();
    for (size_t i = 0; i < len; ++i) {
      uint8_t c = p[at + i];
      out->push_back((c >= 0x20 && c < 0x7f) || c == '\n' ? static_cast<char>(c) : '?');
    }
    at += static_cast<size_t>(len);
    return true;
  }
};

bool valid_code(uint64_t c) { return c >= 1 && c <= 4; }

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& h) {
  std::vector<uint8_t> b;
  put32(b, kWireMagic);
  put16(b, kWireVersion);
  put16(b, static_cast<uint16_t>(Kind::Hello));
  b.insert(b.end(), h.nonce, h.nonce + 16);
  put32(b, static_cast<uint32_t>(h.rank));
  put32(b, static_cast<uint32_t>(h.nranks));
  put64(b, h.host);
  put64(b, h.machine);
  put32(b, h.pid);
  put_name(b, h.name);
  put_name(b, h.hostname);
  put64(b, h.plan);
  b.resize(kHelloBytes, 0);
  return b;
}

std::string parse_hello(const uint8_t* p, size_t n, Hello* out) {
  if (n != kHelloBytes) return common::format("a hello of {} bytes (expected {})", n, kHelloBytes);
  Reader r{p, n};
  uint64_t magic = r.get(4), version = r.get(2), kind = r.get(2);
  if (magic != kWireMagic) return common::format("bad magic {:#x} (not a peerlink rendezvous client)", magic);
  if (version != kWireVersion)
    return common::format("wire version {} (this library speaks {}: mixed peerlink versions)", version, kWireVersion);
  if (kind != static_cast<uint16_t>(Kind::Hello)) return common::format("message kind {} where a hello was due", kind);
  Hello h;
  std::memcpy(h.nonce, p + r.at, 16);
  r.at += 16;
  h.rank = static_cast<int32_t>(r.get(4));
  h.nranks = static_cast<int32_t>(r.get(4));
  h.host = r.get(8);
  h.machine = r.get(8);
  h.pid = static_cast<uint32_t>(r.get(4));
  h.name = r.name();
  h.hostname = r.name();
  h.plan = r.get(8);
  if (!r.ok) return "a truncated hello";
  if (h.nranks < 1 || h.nranks > kMaxWireRanks)
    return common::format("nranks {} is outside [1, {}]", h.nranks, kMaxWireRanks);
  if (h.rank < 0 || h.rank >= h.nranks) return common::format("rank {} is outside [0, {})", h.rank, h.nranks);
  *out = std::move(h);
  return "";
}

std::vector<uint8_t> encode_message(Kind kind, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> b;
  put32(b, kWireMagic);
  put16(b, kWireVersion);
  put16(b, static_cast<uint16_t>(kind));
  put32(b, static_cast<uint32_t>(body.size()));
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

std::string parse_header(const uint8_t* p, size_t n, Kind* kind, uint32_t* body_len) {
  Reader r{p, n};
  uint64_t magic = r.get(4), version = r.get(2), k = r.get(2), len = r.get(4);
  if (!r.ok) return common::format("a truncated header ({} bytes)", n);
  if (magic != kWireMagic) return common::format("bad magic {:#x} (not a peerlink rendezvous)", magic);
  if (version != kWireVersion)
    return common::format("wire version {} (this library speaks {}: mixed peerlink versions)", version, kWireVersion);
  if (k < static_cast<uint16_t>(Kind::Hello) || k > static_cast<uint16_t>(Kind::Verdict))
    return common::format("unknown message kind {}", k);
  if (len > kMaxBody) return common::format("a body of {} bytes (at most {})", len, kMaxBody);
  *kind = static_cast<Kind>(k);
  *body_len = static_cast<uint32_t>(len);
  return "";
}

std::vector<uint8_t> encode_table(const Table& t) {
  std::vector<uint8_t> b;
  put32(b, static_cast<uint32_t>(t.node_of.size()));
  put32(b, static_cast<uint32_t>(t.nodes.size()));
  for (uint32_t n : t.node_of) put32(b, n);
  for (const TableNode& node : t.nodes) {
    put64(b, node.host);
    put64(b, node.machine);
    put_name(b, node.name);
  }
  return b;
}

std::string parse_table(const uint8_t* p, size_t n, int nranks, Table* out) {
  Reader r{p, n};
  uint64_t ranks = r.get(4), nodes = r.get(4);
  if (!r.ok) return "a truncated table";
  if (ranks != static_cast<uint64_t>(nranks)) return common::format("a table of {} ranks (expected {})", ranks, nranks);
  if (nodes < 1 || nodes > ranks) return common::format("a table of {} nodes for {} ranks", nodes, ranks);
  const uint64_t need = ranks * 4 + nodes * (16 + kNameBytes);
  if (n - r.at != need) return common::format("a table body of {} bytes (expected {})", n - r.at, need);
  Table t;
  t.node_of.resize(ranks);
  std::vector<uint8_t> seen(nodes, 0);
  uint64_t next = 0;  // nodes appear in order of first rank
  for (uint64_t i = 0; i < ranks; ++i) {
    uint64_t node = r.get(4);
    if (node >= nodes) return common::format("rank {} on node {} of {}", i, node, nodes);
    if (!seen[node]) {
      if (node != next) return common::format("node {} first appears before node {}", node, next);
      seen[node] = 1;
      ++next;
    }
    t.node_of[i] = static_cast<uint32_t>(node);
  }
  if (next != nodes) return common::format("{} of {} nodes hold no rank", nodes - next, nodes);
  for (uint64_t i = 0; i < nodes; ++i) {
    TableNode node;
    node.host = r.get(8);
    node.machine = r.get(8);
    node.name = r.name();
    for (const TableNode& other : t.nodes)
      if (other.host == node.host) return common::format("nodes {} and {} have one host id", t.nodes.size(), i);
    t.nodes.push_back(std::move(node));
  }
  if (!r.ok) return "a truncated table";
  *out = std::move(t);
  return "";
}

std::vector<uint8_t> encode_failure(const Failure& f) {
  std::vector<uint8_t> b;
  put32(b, static_cast<uint32_t>(f.code));
  put_text(b, f.message);
  return b;
}

std::string parse_failure(const uint8_t* p, size_t n, Failure* out) {
  Reader r{p, n};
  uint64_t code = r.get(4);
  Failure f;
  if (!r.text(&f.message) || r.at != n) return "a malformed failure message";
  if (!valid_code(code)) return common::format("failure code {}", code);
  f.code = static_cast<FailCode>(code);
  *out = std::move(f);
  return "";
}

std::vector<uint8_t> encode_status(const Status& s) {
  std::vector<uint8_t> b;
  put32(b, static_cast<uint32_t>(s.rank));
  put32(b, static_cast<uint32_t>(s.code));
  put_text(b, s.message);
  return b;
}

std::string parse_status(const uint8_t* p, size_t n, int nranks, Status* out) {
  Reader r{p, n};
  Status s;
  s.rank = static_cast<int32_t>(r.get(4));
  uint64_t code = r.get(4);
  if (!r.text(&s.message) || r.at != n) return "a malformed status";
  if (s.rank < 0 || s.rank >= nranks) return common::format("a status of rank {} (nranks {})", s.rank, nranks);
  if (!valid_code(code)) return common::format("status code {}", code);
  s.code = static_cast<FailCode>(code);
  *out = std::move(s);
  return "";
}

std::vector<uint8_t> encode_verdict(const std::vector<VerdictEntry>& failed) {
  std::vector<uint8_t> b;
  put32(b, static_cast<uint32_t>(failed.size()));
  for (const VerdictEntry& e : failed) {
    put32(b, static_cast<uint32_t>(e.rank));
    put32(b, static_cast<uint32_t>(e.code));
    put_text(b, e.message);
  }
  return b;
}

std::string parse_verdict(const uint8_t* p, size_t n, int nranks, std::vector<VerdictEntry>* out) {
  Reader r{p, n};
  uint64_t count = r.get(4);
  if (!r.ok || count > static_cast<uint64_t>(nranks)) return common::format("a verdict of {} failures", count);
  std::vector<VerdictEntry> v;
  for (uint64_t i = 0; i < count; ++i) {
    VerdictEntry e;
    e.rank = static_cast<int32_t>(r.get(4));
    uint64_t code = r.get(4);
    if (!r.text(&e.message)) return "a truncated verdict";
    if (e.rank < 0 || e.rank >= nranks || !valid_code(code))
      return common::format("a verdict entry of rank {} code {}", e.rank, code);
    e.code = static_cast<FailCode>(code);
    v.push_back(std::move(e));
  }
  if (r.at != n) return "trailing bytes after a verdict";
  *out = std::move(v);
  return "";
}

}  // namespace peerlink::hier
