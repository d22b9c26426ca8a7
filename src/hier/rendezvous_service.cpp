// The multi-node rendezvous service (peerlink/multinode.h start_rendezvous): one thread in the
// process that made the unique id, serving one communicator's ranks, then gone.
//
// Round 1: every rank connects and sends a Hello (rank, nranks, node and machine identity, the
// job's nonce); once all nranks came, every rank gets the same Table (node of every rank, nodes in
// order of first rank). Round 2, only when the table has several nodes: every rank reports whether
// its setup succeeded (Status) and every rank gets the same Verdict (the failures). Anything wrong
// (nranks that disagree, a rank out of range or twice, ranks of one node on different machines,
// ranks of a multi-node communicator with different plan thresholds, a rank that left, ranks that
// never came) becomes one Failure sent to every rank, and to ranks that
// come later, until a grace period ends: every rank hears the same error, none waits for nothing.
// Why a thread of the id's maker: the id is all the ranks share (NCCL's bootstrap root lives there
// too), and it is the one process every rank can be told about before any communication exists.
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/format.h"
#include "hier/rendezvous_wire.h"
#include "hier/socket_util.h"
#include "peerlink/errors.h"

namespace peerlink::hier {
namespace {

// Descriptors of live services: a forked child has no service thread, so it closes them (else a
// child that outlives the maker would keep the port open with nobody answering). Never destroyed: a
// service thread may still run while the process exits and its static objects go.
struct Tracked {
  std::mutex mu;
  std::set<int> fds;
};
Tracked& tracked() {
  static Tracked* t = new Tracked;
  return *t;
}
void track(int fd) {
  std::lock_guard<std::mutex> g(tracked().mu);
  tracked().fds.insert(fd);
}
void untrack(int fd) {
  std::lock_guard<std::mutex> g(tracked().mu);
  tracked().fds.erase(fd);
}
void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    tracked();
    pthread_atfork([] { tracked().mu.lock(); }, [] { tracked().mu.unlock(); },
                   [] {
                     for (int fd : tracked().fds) ::close(fd);
                     tracked().fds.clear();
                     tracked().mu.unlock();
                   });
  });
}

// A tracked descriptor.
struct Conn {
  Fd fd;
  std::vector<uint8_t> in;
  bool has_hello = false;
  Hello hello;
  bool has_status = false;
  Status status;
  explicit Conn(int f) : fd(f) { track(f); }
  ~Conn() {
    if (fd) untrack(fd.get());
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
};

std::string rank_names(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += common::format(" and {} more", ranks.size() - 16);
  return s;
}

class Service {
 public:
  Service(Fd listen, const JobNonce& nonce, std::chrono::milliseconds timeout, std::string where)
      : listen_(std::move(listen)), nonce_(nonce), timeout_(timeout), where_(std::move(where)) {
    track(listen_.get());
    auto idle = std::max<std::chrono::milliseconds>(timeout_, std::chrono::minutes(30));
    deadline_ = Clock::now() + idle;
  }
  ~Service() { untrack(listen_.get()); }
  void run();

 private:
  enum class Phase { Meet, Agree, Failed, Done };
  void accept_new();
  void read_from(size_t i);
  void on_hello(size_t i);
  void on_status(size_t i);
  void on_closed(size_t i);
  void finish_meet();
  void finish_agree();
  void fail(FailCode code, const std::string& msg);
  void on_deadline();
  void send(Conn& c, const std::vector<uint8_t>& msg);
  // Sends `msg` to every connection (those with a hello when `ranks_only`), this process's own
  // ranks last: this thread lives in one of them, which may exit as soon as it has its answer.
  void send_all(const std::vector<uint8_t>& msg, bool ranks_only);
  std::string who(const Hello& h) const {
    return common::format("rank {} (host {}, pid {})", h.rank, h.hostname, h.pid);
  }

  Fd listen_;
  JobNonce nonce_;
  std::chrono::milliseconds timeout_;
  std::string where_;
  Clock::time_point deadline_;
  Phase phase_ = Phase::Meet;
  std::vector<std::unique_ptr<Conn>> conns_;
  int nranks_ = 0;                // from the first hello
  std::vector<Conn*> by_rank_;   // null once a rank's connection closed
  std::vector<Hello> hello_;
  std::vector<Status> status_;
  std::vector<uint8_t> arrived_, reported_;
  int hellos_ = 0, statuses_ = 0;
  std::vector<uint8_t> failure_;  // the message every rank gets once Phase::Failed
};

void Service::run() {
  while (phase_ != Phase::Done) {
    std::vector<pollfd> fds;
    fds.push_back({listen_.get(), POLLIN, 0});
    for (auto& c : conns_) fds.push_back({c->fd.get(), POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    int r = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left, 0, 1000)));
    if (r < 0 && errno != EINTR) return;
    if (Clock::now() >= deadline_) {
      on_deadline();
      continue;
    }
    if (r <= 0) continue;
    // Connections first (by index, from the back: read_from may drop the connection it read).
    const Phase before = phase_;
    for (size_t i = conns_.size(); i-- > 0 && phase_ == before;)
      if (i + 1 < fds.size() && fds[i + 1].revents) read_from(i);
    if (phase_ == before && (fds[0].revents & POLLIN)) accept_new();
    if (phase_ == Phase::Failed && before != Phase::Failed) continue;
  }
}

void Service::accept_new() {
  int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;  // EMFILE and the like: the rank retries its connect or times out
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  conns_.push_back(std::make_unique<Conn>(fd));
  if (phase_ == Phase::Failed) {
    send(*conns_.back(), failure_);  // a late rank learns the same error
    conns_.pop_back();
  }
}

void Service::read_from(size_t i) {
  Conn& c = *conns_[i];
  uint8_t buf[4096];
  for (;;) {
    ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      if (c.in.size() > kMaxBody + kHeaderBytes) return on_closed(i);  // nobody sends that much
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return on_closed(i);  // EOF or an error
  }
  if (!c.has_hello && c.in.size() >= kHelloBytes) return on_hello(i);
  if (c.has_hello && !c.has_status && phase_ == Phase::Agree) on_status(i);
}

void Service::on_hello(size_t i) {
  Conn& c = *conns_[i];
  Hello h;
  std::string why = parse_hello(c.in.data(), kHelloBytes, &h);
  if (why.empty() && std::memcmp(h.nonce, nonce_.data(), 16) != 0)
    why = "the unique id names another communicator (a stale or corrupted id)";
  if (why.empty() && phase_ != Phase::Meet) why = "every rank of this communicator already arrived";
  if (!why.empty()) {  // not one of ours: answer it, drop it, serve on
    send(c, encode_message(Kind::Failure, encode_failure({FailCode::Invalid, "multi-node rendezvous at " + where_ + ": " + why})));
    conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
  c.in.erase(c.in.begin(), c.in.begin() + kHelloBytes);
  c.has_hello = true;
  c.hello = h;
  if (hellos_ == 0) {
    nranks_ = h.nranks;
    by_rank_.assign(static_cast<size_t>(nranks_), nullptr);
    hello_.assign(static_cast<size_t>(nranks_), Hello());
    status_.assign(static_cast<size_t>(nranks_), Status());
    arrived_.assign(static_cast<size_t>(nranks_), 0);
    reported_.assign(static_cast<size_t>(nranks_), 0);
    deadline_ = Clock::now() + timeout_;  // the others have the timeout from the first
    // One descriptor per rank: raise the soft limit toward the hard one for large jobs.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < static_cast<rlim_t>(nranks_) + 64) {
      rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, static_cast<rlim_t>(nranks_) + 64);
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (h.nranks != nranks_) {
    return fail(FailCode::Invalid, common::format("{} says nranks {}, but the ranks that came first say nranks {}: every rank "
                                                  "must pass the same nranks", who(h), h.nranks, nranks_));
  }
  if (arrived_[h.rank])
    return fail(FailCode::Invalid, common::format("rank {} arrived twice: {} and {} (two processes passed the same rank)",
                                                  h.rank, who(hello_[h.rank]), who(h)));
  arrived_[h.rank] = 1;
  hello_[h.rank] = h;
  by_rank_[h.rank] = &c;
  if (++hellos_ == nranks_) finish_meet();
}

void Service::finish_meet() {
  Table t;
  std::vector<int> first_rank;  // per node
  t.node_of.resize(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    const Hello& h = hello_[r];
    size_t n = 0;
    while (n < t.nodes.size() && t.nodes[n].host != h.host) ++n;
    if (n == t.nodes.size()) {
      t.nodes.push_back({h.host, h.machine, h.name});
      first_rank.push_back(r);
    } else if (t.nodes[n].machine != h.machine) {
      const Hello& f = hello_[first_rank[n]];
      return fail(FailCode::Invalid,
                  common::format("{} and {} claim one node '{}' (host id {:016x}) but run on different machines "
                                 "(their boot ids differ): ranks of one node meet through its shared memory; give "
                                 "each machine its own PEERLINK_HOSTID / NCCL_HOSTID",
                                 who(f), who(h), h.name, h.host));
    }
    t.node_of[r] = static_cast<uint32_t>(n);
  }
  // Ranks of a multi-node communicator choose their plans alone: they must choose alike.
  for (int r = 1; r < nranks_ && t.nodes.size() > 1; ++r)
    if (hello_[r].plan != hello_[0].plan)
      return fail(FailCode::Invalid, common::format("{} has PEERLINK_HIER_MIN_BYTES={} but {} has {}: every rank of a "
                                                    "communicator across nodes must use the same value",
                                                    who(hello_[r]), hello_[r].plan, who(hello_[0]), hello_[0].plan));
  send_all(encode_message(Kind::Table, encode_table(t)), true);
  if (t.nodes.size() == 1) {
    phase_ = Phase::Done;  // one node: nothing to agree on
    return;
  }
  phase_ = Phase::Agree;
  deadline_ = Clock::now() + 2 * timeout_ + std::chrono::seconds(10);  // node setup and engine load run meanwhile
  for (size_t i = conns_.size(); i-- > 0 && phase_ == Phase::Agree;)
    if (conns_[i]->in.size() >= kHeaderBytes) on_status(i);
}

void Service::on_status(size_t i) {
  Conn& c = *conns_[i];
  Kind kind;
  uint32_t len = 0;
  if (c.in.size() < kHeaderBytes) return;
  std::string why = parse_header(c.in.data(), kHeaderBytes, &kind, &len);
  if (why.empty() && kind != Kind::Status) why = common::format("message kind {} where a status was due", int(kind));
  if (!why.empty()) return fail(FailCode::Invalid, common::format("{} sent a bad status: {}", who(c.hello), why));
  if (c.in.size() < kHeaderBytes + len) return;
  Status s;
  why = parse_status(c.in.data() + kHeaderBytes, len, nranks_, &s);
  if (why.empty() && s.rank != c.hello.rank) why = common::format("it speaks for rank {}", s.rank);
  if (!why.empty()) return fail(FailCode::Invalid, common::format("{} sent a bad status: {}", who(c.hello), why));
  c.has_status = true;
  reported_[s.rank] = 1;
  status_[s.rank] = std::move(s);
  if (++statuses_ == nranks_) finish_agree();
}

void Service::finish_agree() {
  std::vector<VerdictEntry> failed;
  for (int r = 0; r < nranks_; ++r) {
    const Status& s = status_[r];
    if (!s.message.empty()) failed.push_back({r, s.code, common::format("{}: {}", who(hello_[r]), s.message)});
  }
  send_all(encode_message(Kind::Verdict, encode_verdict(failed)), false);
  phase_ = Phase::Done;
}

void Service::on_closed(size_t i) {
  Conn& c = *conns_[i];
  const bool counted = c.has_hello && phase_ != Phase::Failed && by_rank_[c.hello.rank] == &c;
  const Hello h = c.hello;
  const bool reported = c.has_status;
  if (counted) by_rank_[h.rank] = nullptr;
  conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
  if (counted && phase_ == Phase::Meet)
    return fail(FailCode::PeerLost, common::format("{} left the multi-node rendezvous at {} before every rank arrived "
                                                   "(its process ended or gave up)", who(h), where_));
  if (counted && phase_ == Phase::Agree && !reported)
    return fail(FailCode::PeerLost, common::format("{} left before reporting its setup (its process ended)", who(h)));
}

void Service::on_deadline() {
  if (phase_ == Phase::Failed || (phase_ == Phase::Meet && hellos_ == 0)) {
    phase_ = Phase::Done;  // grace over, or nobody ever came
    return;
  }
  std::vector<int> missing;
  for (int r = 0; r < nranks_; ++r)
    if (!arrived_[r] || (phase_ == Phase::Agree && !reported_[r])) missing.push_back(r);
  if (phase_ == Phase::Meet)
    return fail(FailCode::Timeout,
                common::format("ranks {} of {} did not reach the multi-node rendezvous at {} within {} ms (they "
                               "never called ncclCommInitRank, or cannot reach that address: see "
                               "PEERLINK_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)",
                               rank_names(missing), nranks_, where_, timeout_.count()));
  fail(FailCode::Timeout, common::format("ranks {} of {} did not report their setup in time", rank_names(missing), nranks_));
}

void Service::fail(FailCode code, const std::string& msg) {
  failure_ = encode_message(Kind::Failure, encode_failure({code, "multi-node rendezvous: " + msg}));
  send_all(failure_, false);
  conns_.clear();
  phase_ = Phase::Failed;
  deadline_ = Clock::now() + timeout_;  // ranks that come later get the same answer meanwhile
}

void Service::send_all(const std::vector<uint8_t>& msg, bool ranks_only) {
  const uint32_t self = static_cast<uint32_t>(getpid());
  for (int own = 0; own < 2; ++own)
    for (auto& c : conns_)
      if ((c->has_hello || !ranks_only) && (c->has_hello && c->hello.pid == self) == (own == 1)) send(*c, msg);
}

void Service::send(Conn& c, const std::vector<uint8_t>& msg) {
  // Bounded: a rank that does not read cannot hold the others for long.
  write_all(c.fd.get(), msg.data(), msg.size(), Clock::now() + std::chrono::seconds(10));
}

}  // namespace
}  // namespace peerlink::hier

namespace peerlink {
using namespace hier;

RendezvousAddress start_rendezvous(const JobNonce& nonce, const Options& opts) {
  install_fork_handler();
  std::string ifname;
  SockAddr a = pick_listen_address(opts.socket_ifname, &ifname);
  Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw SysError(common::format("multi-node rendezvous: socket: {}", std::strerror(errno)), errno, "socket");
  if (a.ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&a.ss)->sin_port = 0;
  else reinterpret_cast<sockaddr_in6*>(&a.ss)->sin6_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0)
    throw SysError(common::format("multi-node rendezvous: bind to {} ({}): {}", to_string(a), ifname, std::strerror(errno)),
                   errno, "bind");
  if (::listen(fd.get(), SOMAXCONN) != 0)
    throw SysError(common::format("multi-node rendezvous: listen: {}", std::strerror(errno)), errno, "listen");
  socklen_t len = sizeof a.ss;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a.ss), &len);
  a.len = len;
  auto service = std::make_unique<Service>(std::move(fd), nonce, opts.timeout, to_string(a) + " (" + ifname + ")");
  std::thread([s = std::move(service)] { s->run(); }).detach();
  return pack_address(a);
}

std::string describe_rendezvous(const RendezvousAddress& address) {
  SockAddr a;
  std::string why = unpack_address(address, &a);
  return why.empty() ? to_string(a) : "(invalid address: " + why + ")";
}

}  // namespace peerlink
