// The multi-node rendezvous's messages (rendezvous_service.cpp, rendezvous_client.cpp): fixed
// little-endian encodings, and parsers that treat every byte as untrusted (they come from the
// network). Each parser returns "" and fills its output, or says what is wrong; it never reads past
// the bytes it is given (tests/fuzz/rendezvous_wire_fuzz.cpp).
//
// rank -> service:  Hello (kHelloBytes), later a Status (header + body) when there are several nodes
// service -> rank:  Table or Failure (header + body), later a Verdict or Failure
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace peerlink::hier {

constexpr uint32_t kWireMagic = 0x56524c50;  // "PLRV"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kNameBytes = 64;            // host names, NUL-padded
constexpr int kMaxWireRanks = 1 << 20;       // a sanity bound: the table is 4 bytes per rank
constexpr size_t kMaxMessage = 4096;         // error texts
constexpr size_t kHeaderBytes = 12;          // magic u32, version u16, kind u16, body length u32
constexpr size_t kHelloBytes = 192;
constexpr size_t kMaxBody = size_t(8) << 20;

enum class Kind : uint16_t { Hello = 1, Table = 2, Failure = 3, Status = 4, Verdict = 5 };

// What an error carried over the wire becomes on the rank (peerlink's error types).
enum class FailCode : uint32_t { Invalid = 1, Timeout = 2, PeerLost = 3, Other = 4 };

struct Hello {
  uint8_t nonce[16] = {};
  int32_t rank = -1;
  int32_t nranks = 0;
  uint64_t host = 0;     // node identity (host_id)
  uint64_t machine = 0;  // boot id hash
  uint32_t pid = 0;
  uint64_t plan = 0;     // Options::hier_min_bytes: every rank of a multi-node communicator must agree
  std::string name;      // node name (Options::host_id or the hostname), at most kNameBytes - 1 characters
  std::string hostname;  // the machine's hostname, for messages
};

struct TableNode {
  uint64_t host = 0;
  uint64_t machine = 0;
  std::string name;
};
struct Table {
  std::vector<uint32_t> node_of;  // per rank
  std::vector<TableNode> nodes;   // in order of first rank
};

struct Failure {
  FailCode code = FailCode::Other;
  std::string message;
};

struct Status {
  int32_t rank = -1;
  FailCode code = FailCode::Other;  // meaningful when message is not empty
  std::string message;              // "" = ready
};

struct VerdictEntry {
  int32_t rank = -1;
  FailCode code = FailCode::Other;
  std::string message;
};

std::vector<uint8_t> encode_hello(const Hello& h);
std::string parse_hello(const uint8_t* p, size_t n, Hello* out);

// A message: header + body.
std::vector<uint8_t> encode_message(Kind kind, const std::vector<uint8_t>& body);
// Parses a header: the kind and the body length that follows (<= kMaxBody).
std::string parse_header(const uint8_t* p, size_t n, Kind* kind, uint32_t* body_len);

std::vector<uint8_t> encode_table(const Table& t);
// `nranks`: what the reader expects (its own nranks); the table must have exactly that many ranks,
// nodes in order of first rank, every node non-empty and of a distinct host.
std::string parse_table(const uint8_t* p, size_t n, int nranks, Table* out);

std::vector<uint8_t> encode_failure(const Failure& f);
std::string parse_failure(const uint8_t* p, size_t n, Failure* out);

std::vector<uint8_t> encode_status(const Status& s);
std::string parse_status(const uint8_t* p, size_t n, int nranks, Status* out);

std::vector<uint8_t> encode_verdict(const std::vector<VerdictEntry>& failed);
std::string parse_verdict(const uint8_t* p, size_t n, int nranks, std::vector<VerdictEntry>* out);

}  // namespace peerlink::hier
