// HierCommunicator: construction (create, split, shrink), accessors, errors and teardown. The
// collectives are in hier_plans.cpp, send/recv in hier_p2p.cpp.
//
// Order of creation, the same for a new communicator and for a child: the node's peerlink
// Communicator first (bounded by Options::timeout), then every rank reports whether its part
// succeeded and every rank gets the same list (the Meeting's agree(), or an exchange over the
// parent's world engine), and only then the engine collectives (the real NCCL's init or split),
// which no rank may miss: a rank that failed before them would leave the others waiting inside the
// real NCCL, which has no timeout. Rails are split from the world engine last.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/format.h"
#include "hier/hier_impl.h"
#include "peerlink/device.h"
#include "peerlink/errors.h"

namespace peerlink {
namespace {

// The error a rank throws once the ranks agreed that setup failed somewhere: its own error's type
// when its own part failed, PeerLostError (a peer is unusable) otherwise; the message lists every
// failed rank.
[[noreturn]] void throw_agreed(const char* what, const std::vector<std::string>& failed, std::exception_ptr mine) {
  std::string msg = common::format("{}: setup failed on {} rank{}: ", what, failed.size(), failed.size() == 1 ? "" : "s");
  for (size_t i = 0; i < failed.size(); ++i) msg += (i ? "; " : "") + failed[i];
  if (mine) {
    try {
      std::rethrow_exception(mine);
    } catch (const InvalidArgument&) {
      throw InvalidArgument(msg);
    } catch (const TimeoutError&) {
      throw TimeoutError(msg);
    } catch (const UnsupportedError&) {
      throw UnsupportedError(msg);
    } catch (...) {
    }
  }
  throw PeerLostError(msg);
}

std::unique_ptr<HierCommunicator::Impl> base_impl(int rank, int nranks, int device, std::string job_id, NodeMap map,
                                                  const Options& opts) {
  auto p = std::make_unique<HierCommunicator::Impl>();
  p->rank = rank;
  p->nranks = nranks;
  p->device = device;
  p->job_id = std::move(job_id);
  p->map = std::move(map);
  p->opts = opts;
  if (p->map.nranks() != nranks)
    throw InvalidArgument(common::format("HierCommunicator: a node map of {} ranks for {} ranks", p->map.nranks(), nranks));
  p->node = p->map.node_of(rank);
  p->local_rank = p->map.local_rank(rank);
  p->local_size = p->map.local_size(p->node);
  return p;
}

// The node's peerlink Communicator (none for a node of one rank); its id names the node. Every
// pair is bound for stream-ordered send/recv at once (one eager zero-byte exchange, as the NCCL
// library does for its communicators), so a first send/recv may be captured in a graph. A pair
// without a stream-ordered path (relay: no peer access) makes the node's send/recv go to the world
// engine instead; the node's ranks agree on that (every rank of the node routes alike).
void make_node_comm(HierCommunicator::Impl& p) {
  if (p.local_size == 1) return;
  auto c = std::make_unique<Communicator>(common::format("{}.n{}", p.job_id, p.node), p.local_rank, p.local_size,
                                          p.device, p.opts);
  void* stream = p.device >= 0 ? device::stream_create() : nullptr;
  std::exception_ptr failed;
  int32_t p2p_ok = 1;
  c->group_start();
  try {
    for (int q = 0; q < p.local_size; ++q)
      if (q != p.local_rank) {
        try {
          c->send(q, nullptr, 0, stream);
          c->recv(q, nullptr, 0, stream);
        } catch (const UnsupportedError&) {  // a relay pair: the same answer on both of its ranks
          p2p_ok = 0;
        }
      }
  } catch (...) {
    failed = std::current_exception();
  }
  try {
    c->group_end();
    if (stream) device::stream_sync(stream);
  } catch (...) {
    if (!failed) failed = std::current_exception();
  }
  if (stream) device::stream_destroy(stream);
  if (failed) std::rethrow_exception(failed);
  std::vector<int32_t> all(static_cast<size_t>(p.local_size));
  c->allgather_bytes(&p2p_ok, sizeof p2p_ok, all.data());
  for (int32_t ok : all) p.node_p2p = p.node_p2p && ok;
  p.node_comm = std::move(c);
}

// Agreement over an engine all ranks share: fixed-size reports (the first bytes of each error);
// (rank, "rank r (host h): why") of every rank that failed.
std::vector<std::pair<int, std::string>> agree_over(InterNodeEngine& e, const NodeMap& map, const std::string& mine) {
  struct Report {
    int32_t failed;
    char msg[252];
  } me{}, none{};
  me.failed = !mine.empty();
  std::strncpy(me.msg, mine.c_str(), sizeof me.msg - 1);
  std::vector<Report> all(static_cast<size_t>(e.size()), none);
  e.exchange(&me, sizeof me, all.data());
  std::vector<std::pair<int, std::string>> out;
  for (int r = 0; r < e.size(); ++r)
    if (all[r].failed) {
      all[r].msg[sizeof all[r].msg - 1] = 0;
      std::string host = r < map.nranks() ? map.name_of_node(map.node_of(r)) : "";
      out.emplace_back(r, common::format("rank {}{}: {}", r, host.empty() ? "" : " (host " + host + ")", all[r].msg));
    }
  return out;
}

}  // namespace

HierCommunicator::HierCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  Impl& p = *impl_;
  // Two levels need the same number of ranks on every node and at least two of them; the rail of
  // local index l is then one rank per node, ordered by node (its rank = the node index).
  const bool two_level = p.map.nodes() > 1 && p.map.uniform() && p.local_size > 1;
  p.rail_reason = two_level ? nullptr : !p.map.uniform() ? "uneven ranks per node" : "one rank per node";
  p.rail = p.world->split(two_level ? p.local_rank : kNoColor, p.node);
  if (two_level && (!p.rail || p.rail->size() != p.map.nodes() || p.rail->rank() != p.node))
    throw Error(common::format("HierCommunicator: the rail of local rank {} has {} members, rank {} (expected {}, {})",
                               p.local_rank, p.rail ? p.rail->size() : 0, p.rail ? p.rail->rank() : -1, p.map.nodes(),
                               p.node));
}

HierCommunicator::~HierCommunicator() = default;

std::unique_ptr<HierCommunicator> HierCommunicator::create(HierSetup s, Meeting& meeting, const EngineFactory& engine) {
  if (s.map.nodes() < 2)
    throw InvalidArgument("HierCommunicator::create: the node map has one node (use a Communicator)");
  auto p = base_impl(s.rank, s.nranks, s.device, std::move(s.job_id), std::move(s.map), s.opts);
  std::string err;
  std::exception_ptr mine;
  try {
    make_node_comm(*p);
    if (engine.prepare) err = engine.prepare();
    if (!err.empty()) throw UnsupportedError(err);
  } catch (const std::exception& e) {
    err = e.what();
    mine = std::current_exception();
  }
  std::vector<std::string> failed = meeting.agree(err);
  if (!failed.empty()) throw_agreed("multi-node communicator", failed, mine);
  p->world = engine.create();
  if (!p->world || p->world->size() != p->nranks || p->world->rank() != p->rank)
    throw Error(common::format("HierCommunicator: the world engine has {} members, rank {} (expected {}, {})",
                               p->world ? p->world->size() : 0, p->world ? p->world->rank() : -1, p->nranks, p->rank));
  return std::unique_ptr<HierCommunicator>(new HierCommunicator(std::move(p)));
}

HierCommunicator::Child HierCommunicator::split(int color, int key, const Options& child_opts) {
  Impl& p = *impl_;
  if (color < 0 && color != kNoColor)
    throw InvalidArgument(common::format("HierCommunicator::split: color {} is negative", color));
  const SplitMembers split = split_members(*p.world, color, key);
  const std::vector<int>& members = split.members;
  const int n = p.splits++;
  Child child;
  std::unique_ptr<Impl> c;
  std::string err;
  std::exception_ptr failure;
  if (color != kNoColor) {
    child.job_id = common::format("{}.s{}c{}", p.job_id, n, color);
    child.nranks = static_cast<int>(members.size());
    child.rank = split.rank;
    try {
      NodeMap cmap = p.map.subset(members);
      if (cmap.nodes() == 1) {
        child.node_only = std::make_unique<Communicator>(child.job_id, child.rank, child.nranks, p.device, child_opts);
      } else {
        c = base_impl(child.rank, child.nranks, p.device, child.job_id, std::move(cmap), child_opts);
        make_node_comm(*c);
      }
    } catch (const std::exception& e) {
      err = e.what();
      failure = std::current_exception();
    }
  }
  // Every rank of this communicator reports, then every rank takes part in the engine's split,
  // which is collective here too; a child with a failed member asks for no engine.
  std::vector<std::string> ours;  // the failures of this rank's child
  for (const auto& f : agree_over(*p.world, p.map, err))
    if (std::find(members.begin(), members.end(), f.first) != members.end()) ours.push_back(f.second);
  auto cworld = p.world->split(c && ours.empty() ? color : kNoColor, key);
  if (color == kNoColor) return Child();
  if (!ours.empty()) throw_agreed("split", ours, failure);
  if (!c) return child;
  c->world = std::move(cworld);
  child.hier = std::unique_ptr<HierCommunicator>(new HierCommunicator(std::move(c)));
  return child;
}

HierCommunicator::Child HierCommunicator::shrink(const std::vector<int>& excluded_in, const Options& child_opts) {
  Impl& p = *impl_;
  std::vector<int> excluded = excluded_in;
  std::sort(excluded.begin(), excluded.end());
  for (size_t i = 0; i < excluded.size(); ++i)
    if (excluded[i] < 0 || excluded[i] >= p.nranks || excluded[i] == p.rank || (i && excluded[i] == excluded[i - 1]))
      throw InvalidArgument(common::format("HierCommunicator::shrink: excluded rank {} is out of [0, {}), repeated, or "
                                           "this rank ({})", excluded[i], p.nranks, p.rank));
  std::vector<int> survivors;
  for (int r = 0; r < p.nranks; ++r)
    if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
  Child child;
  child.job_id = common::format("{}.k{}x", p.job_id, p.shrinks++);
  for (int e : excluded) child.job_id += std::to_string(e) + ".";
  child.nranks = static_cast<int>(survivors.size());
  child.rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), p.rank) - survivors.begin());
  NodeMap cmap = p.map.subset(survivors);
  if (cmap.nodes() == 1) {  // the survivors share a node: no engine, no agreement needed
    child.node_only = std::make_unique<Communicator>(child.job_id, child.rank, child.nranks, p.device, child_opts);
    return child;
  }
  // The excluded ranks may be dead: the engine's shrink (survivors only) comes first, and the
  // agreement runs over the new engine.
  auto c = base_impl(child.rank, child.nranks, p.device, child.job_id, std::move(cmap), child_opts);
  c->world = p.world->shrink(excluded);
  std::string err;
  std::exception_ptr failure;
  try {
    make_node_comm(*c);
  } catch (const std::exception& e) {
    err = e.what();
    failure = std::current_exception();
  }
  std::vector<std::string> failed;
  for (const auto& f : agree_over(*c->world, c->map, err)) failed.push_back(f.second);
  if (!failed.empty()) throw_agreed("shrink", failed, failure);
  child.hier = std::unique_ptr<HierCommunicator>(new HierCommunicator(std::move(c)));
  return child;
}

int HierCommunicator::rank() const { return impl_->rank; }
int HierCommunicator::nranks() const { return impl_->nranks; }
int HierCommunicator::device() const { return impl_->device; }
const NodeMap& HierCommunicator::map() const { return impl_->map; }
const Options& HierCommunicator::options() const { return impl_->opts; }
const std::string& HierCommunicator::job_id() const { return impl_->job_id; }
Communicator* HierCommunicator::node_comm() { return impl_->node_comm.get(); }
InterNodeEngine& HierCommunicator::world() { return *impl_->world; }
InterNodeEngine* HierCommunicator::rail() { return impl_->rail.get(); }

std::string HierCommunicator::describe() const {
  const Impl& p = *impl_;
  std::string s = common::format("{}; inside the node: {}; between nodes: {} over all {} ranks", p.map.describe(),
                                 p.node_comm ? common::format("peerlink ({} ranks)", p.local_size) : "(one rank)",
                                 p.world->name(), p.nranks);
  if (p.node_comm && !p.node_p2p) s += "; send/recv inside the node on the engine (a pair without a stream-ordered path)";
  if (p.rail && p.opts.hier_min_bytes)
    s += common::format(", rails of {} ranks: two-level collectives from {} bytes (PEERLINK_HIER_MIN_BYTES)", p.rail->size(),
                        p.opts.hier_min_bytes);
  else if (p.rail)
    s += common::format(", rails of {} ranks: two-level collectives off (PEERLINK_HIER_MIN_BYTES=0)", p.rail->size());
  else
    s += common::format(": every collective whole on it ({})", p.rail_reason);
  return s;
}

void HierCommunicator::check_async_error() {
  Impl& p = *impl_;
  if (p.node_comm && !p.node_comm->closed()) {
    if (p.used_node_collectives) allreduce_check(*p.node_comm);
    p.node_comm->check_async_error();
  }
  p.world->check_async_error();
  if (p.rail) p.rail->check_async_error();
}

void HierCommunicator::finalize() {
  impl_->world->finalize();
  if (impl_->rail) impl_->rail->finalize();
}

void HierCommunicator::abort() noexcept {
  Impl& p = *impl_;
  try {
    if (p.node_comm) p.node_comm->close();
  } catch (...) {  // abort reports nothing
  }
  if (p.rail) p.rail->abort();
  p.world->abort();
}

void HierCommunicator::revoke() {
  Impl& p = *impl_;
  if (p.node_comm) p.node_comm->close();
  if (p.rail) p.rail->revoke();
  p.world->revoke();
}

void* HierCommunicator::Impl::scratch_for(void* stream, size_t bytes) {
  std::lock_guard<std::mutex> g(scratch_mu);
  auto& slot = scratch[stream];
  if (slot.second >= bytes) return slot.first;
  size_t grow = slot.second ? slot.second : 4096;
  while (grow < bytes) grow *= 2;
  void* fresh = device < 0 ? std::malloc(grow) : device::alloc_capture_safe(grow);
  if (!fresh) throw std::bad_alloc();
  if (slot.first) retired.push_back(slot.first);
  slot = {fresh, grow};
  return fresh;
}

void HierCommunicator::Impl::copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (device < 0) std::memmove(dst, src, bytes);
  else device::copy_async(dst, src, bytes, stream);
}

HierCommunicator::Impl::~Impl() {
  for (auto& s : scratch)
    if (s.second.first) retired.push_back(s.second.first);
  for (void* q : retired) {
    try {
      if (device < 0) std::free(q);
      else device::free(q);
    } catch (...) {  // a destructor reports nothing; the device may be gone already
    }
  }
}

}  // namespace peerlink
