// A rank's side of the multi-node rendezvous (peerlink/multinode.h connect_rendezvous; the service
// is rendezvous_service.cpp): connect, say who we are, get the table; when there are several nodes,
// later report this rank's setup and get everyone's. Every wait ends by a deadline a little after
// the service's own, so a rank hears the service's error (which names the ranks at fault) rather
// than timing out first; every byte received is checked (rendezvous_wire.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cstring>

#include "bootstrap/host_identity.h"
#include "common/format.h"
#include "hier/rendezvous_wire.h"
#include "hier/socket_util.h"
#include "peerlink/errors.h"

namespace peerlink {
namespace {

using namespace hier;

[[noreturn]] void throw_failure(const Failure& f) {
  switch (f.code) {
    case FailCode::Invalid: throw InvalidArgument(f.message);
    case FailCode::Timeout: throw TimeoutError(f.message);
    case FailCode::PeerLost: throw PeerLostError(f.message);
    default: throw Error(f.message);
  }
}

class TcpMeeting : public Meeting {
 public:
  TcpMeeting(const RendezvousAddress& address, const JobNonce& nonce, int rank, int nranks, const Options& opts)
      : nonce_(nonce), rank_(rank), nranks_(nranks), opts_(opts) {
    std::string why = unpack_address(address, &addr_);
    if (!why.empty())
      throw InvalidArgument(common::format("multi-node rendezvous: the unique id carries an invalid address ({})", why));
    where_ = to_string(addr_);
  }

  NodeMap meet() override {
    // The service waits Options::timeout from the first rank; ours started no earlier, so a little
    // more lets its answer (naming who is missing) arrive first.
    auto deadline = Clock::now() + opts_.timeout + std::chrono::seconds(2);
    std::string why;
    fd_ = connect_until(addr_, deadline, &why);
    if (!fd_)
      throw TimeoutError(common::format(
          "multi-node rendezvous: rank {} cannot reach {} ({}): the process that made the unique id must stay alive "
          "until every rank joined, and its address must be reachable from this host (PEERLINK_SOCKET_IFNAME / "
          "NCCL_SOCKET_IFNAME choose it)",
          rank_, where_, why));
    int one = 1;
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bootstrap::HostIdentity me = bootstrap::host_identity(opts_.host_id);
    Hello h;
    std::memcpy(h.nonce, nonce_.data(), 16);
    h.rank = rank_;
    h.nranks = nranks_;
    h.host = me.node;
    h.machine = me.machine;
    h.pid = static_cast<uint32_t>(getpid());
    h.name = me.name;
    h.hostname = me.hostname;
    h.plan = opts_.hier_min_bytes;
    std::vector<uint8_t> hello = encode_hello(h);
    check_io(write_all(fd_.get(), hello.data(), hello.size(), deadline), "sending this rank's hello");
    std::vector<uint8_t> body;
    Kind kind = receive(deadline, &body);
    if (kind == Kind::Failure) throw_failure(parse_body_failure(body));
    if (kind != Kind::Table) bad(common::format("message kind {} where the table was due", int(kind)));
    Table t;
    why = parse_table(body.data(), body.size(), nranks_, &t);
    if (!why.empty()) bad(why);
    std::vector<uint64_t> hosts(t.node_of.size());
    std::vector<std::string> names;
    std::vector<uint64_t> machines;
    for (size_t r = 0; r < t.node_of.size(); ++r) hosts[r] = t.nodes[t.node_of[r]].host;
    for (const TableNode& n : t.nodes) {
      names.push_back(n.name);
      machines.push_back(n.machine);
    }
    if (hosts[static_cast<size_t>(rank_)] != me.node)
      bad(common::format("the table puts rank {} on host id {:016x}, this rank's is {:016x}", rank_,
                         hosts[static_cast<size_t>(rank_)], me.node));
    NodeMap map(std::move(hosts), std::move(names), std::move(machines));
    if (map.nodes() == 1) fd_ = Fd();  // the service is done with us
    return map;
  }

  std::vector<std::string> agree(const std::string& my_error) override {
    if (!fd_) throw InvalidArgument("multi-node rendezvous: agree() without a meeting of several nodes");
    auto deadline = Clock::now() + 2 * opts_.timeout + std::chrono::seconds(15);
    Status s;
    s.rank = rank_;
    s.code = FailCode::Other;
    s.message = my_error;
    std::vector<uint8_t> msg = encode_message(Kind::Status, encode_status(s));
    check_io(write_all(fd_.get(), msg.data(), msg.size(), deadline), "reporting this rank's setup");
    std::vector<uint8_t> body;
    Kind kind = receive(deadline, &body);
    fd_ = Fd();
    if (kind == Kind::Failure) throw_failure(parse_body_failure(body));
    if (kind != Kind::Verdict) bad(common::format("message kind {} where the verdict was due", int(kind)));
    std::vector<VerdictEntry> failed;
    std::string why = parse_verdict(body.data(), body.size(), nranks_, &failed);
    if (!why.empty()) bad(why);
    std::vector<std::string> out;
    for (VerdictEntry& e : failed) out.push_back(std::move(e.message));
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    throw InvalidArgument(common::format("multi-node rendezvous at {}: rank {} received a malformed answer: {}", where_,
                                         rank_, why));
  }
  void check_io(IoResult r, const char* what) {
    if (r == IoResult::Ok) return;
    if (r == IoResult::Timeout)
      throw TimeoutError(common::format("multi-node rendezvous at {}: rank {}: no answer within the timeout while {}",
                                        where_, rank_, what));
    throw PeerLostError(common::format("multi-node rendezvous at {}: rank {}: the service closed the connection while "
                                       "{} (the process that made the unique id ended?)",
                                       where_, rank_, what));
  }
  Kind receive(Clock::time_point deadline, std::vector<uint8_t>* body) {
    uint8_t header[kHeaderBytes];
    check_io(read_exact(fd_.get(), header, sizeof header, deadline), "waiting for the other ranks");
    Kind kind;
    uint32_t len = 0;
    std::string why = parse_header(header, sizeof header, &kind, &len);
    if (!why.empty()) bad(why);
    body->resize(len);
    if (len) check_io(read_exact(fd_.get(), body->data(), len, deadline), "receiving the answer");
    return kind;
  }
  Failure parse_body_failure(const std::vector<uint8_t>& body) {
    Failure f;
    std::string why = parse_failure(body.data(), body.size(), &f);
    if (!why.empty()) bad(why);
    return f;
  }

  JobNonce nonce_;
  int rank_, nranks_;
  Options opts_;
  SockAddr addr_;
  std::string where_;
  Fd fd_;
};

}  // namespace

std::unique_ptr<Meeting> connect_rendezvous(const RendezvousAddress& address, const JobNonce& nonce, int rank,
                                            int nranks, const Options& opts) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw InvalidArgument(common::format("multi-node rendezvous: rank {} of nranks {} is out of range", rank, nranks));
  return std::make_unique<TcpMeeting>(address, nonce, rank, nranks, opts);
}

}  // namespace peerlink
