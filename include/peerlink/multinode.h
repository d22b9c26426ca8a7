// Communicators that span nodes (layer hier/, docs/multi-node.md, docs/design-multinode.md).
//
// A Communicator is one node's: its ranks meet through this machine's shared memory. A job over
// several nodes gets a HierCommunicator: every rank learns the node map (which ranks share its
// node) before deciding anything, then peerlink carries what stays inside a node and an
// inter-node engine what crosses nodes (the real NCCL on GPUs, provided by libnccl.so.2 from the
// library it loaded; on the host backend a shared-memory stand-in, so CI runs every plan across
// simulated nodes). AllReduce = peerlink reduce-scatter inside each node -> the engine's allreduce
// of each shard among the ranks of equal local index (a "rail") -> peerlink all-gather inside each
// node; the other collectives likewise; send/recv per peer by node; the whole op on the engine's
// world group where two levels cannot apply or do not pay.
//
// Who uses it: libnccl.so.2 (src/nccl/, a TCP rendezvous through its unique id) and the PyTorch
// backend (its store as the Meeting, a process group as the engine). Everything here is
// stream-ordered like peerlink's collectives (host backend: synchronous), and every wait of the
// peerlink side is bounded by Options::timeout.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "peerlink/collectives.h"
#include "peerlink/communicator.h"

namespace peerlink {

// ---- host identity ---------------------------------------------------------------------------
// This rank's node identity: a hash of Options::host_id (PEERLINK_HOSTID, else NCCL_HOSTID) when
// set, else of the hostname up to its first '.' and the boot id (as NCCL's host hash).
uint64_t host_id(const Options& opts = Options::from_env());
// The same node's name for messages: Options::host_id when set, else the hostname.
std::string host_name(const Options& opts = Options::from_env());

// ---- node map --------------------------------------------------------------------------------
// Which ranks share a node, from every rank's host identity. Nodes are numbered in order of their
// first rank; a node's ranks (its local ranks 0, 1, ...) in rank order. Every rank that builds it
// from the same gathered table gets the same map.
class NodeMap {
 public:
  NodeMap() = default;
  // hosts[r]: rank r's host_id. names/machines (optional, per node in node order): for messages,
  // and the machine (boot id hash) each node runs on, 0 = unknown.
  explicit NodeMap(std::vector<uint64_t> hosts, std::vector<std::string> names = {},
                   std::vector<uint64_t> machines = {});
  int nranks() const { return static_cast<int>(node_of_.size()); }
  int nodes() const { return static_cast<int>(ranks_.size()); }
  int node_of(int rank) const;
  int local_rank(int rank) const;
  int local_size(int node) const;
  const std::vector<int>& ranks_of_node(int node) const;
  // The ranks of local index `local` on every node that has one, in node order (a rail).
  std::vector<int> rail(int local) const;
  uint64_t host_of_node(int node) const;
  const std::string& name_of_node(int node) const;  // "" when unknown
  uint64_t machine_of_node(int node) const;         // 0 when unknown
  bool uniform() const;          // every node has the same number of ranks
  bool node_contiguous() const;  // every node's ranks are consecutive, nodes in rank order
  // The map of a sub-communicator: members[i] (a rank of this map) becomes rank i.
  NodeMap subset(const std::vector<int>& members) const;
  // "2 nodes x 2 ranks, node-contiguous: node 0 (a) ranks 0-1; node 1 (b) ranks 2-3"
  std::string describe() const;

 private:
  std::vector<int> node_of_, local_of_;
  std::vector<std::vector<int>> ranks_;
  std::vector<uint64_t> hosts_, machines_;
  std::vector<std::string> names_;
};

// ---- inter-node engine -----------------------------------------------------------------------
constexpr int kNoColor = -1;  // split(): take part, belong to no new group (NCCL_SPLIT_NOCOLOR)

// What crosses nodes: a group of ranks (its members, numbered 0..size-1) with NCCL's collectives
// and grouped send/recv, enqueued on `stream` (host stand-in: synchronous). Counts are elements of
// `dtype` for reductions and bytes for data movement. Errors are thrown (peerlink's types).
class InterNodeEngine {
 public:
  virtual ~InterNodeEngine() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // for logs: "real NCCL", "shared-memory stand-in"
  virtual void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, void* stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dtype, ReduceOp op,
                              void* stream) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                      void* stream) = 0;
  virtual void all_gather(const void* send, void* recv, size_t bytes, void* stream) = 0;
  virtual void broadcast(const void* send, void* recv, size_t bytes, int root, void* stream) = 0;
  // Sends and receives between group_start and group_end are issued together (any pattern).
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send(int peer, const void* buf, size_t bytes, void* stream) = 0;
  virtual void recv(int peer, void* buf, size_t bytes, void* stream) = 0;
  // Control data: a blocking allgather of `bytes` host bytes per member into all[member * bytes].
  virtual void exchange(const void* mine, size_t bytes, void* all) = 0;
  // Collective over the members: a new engine of those with equal color, ordered by (key, rank);
  // kNoColor takes part and gets null.
  virtual std::unique_ptr<InterNodeEngine> split(int color, int key) = 0;
  // Called by every member but `excluded` (ascending, may be dead): a new engine without them.
  virtual std::unique_ptr<InterNodeEngine> shrink(const std::vector<int>& excluded) = 0;
  // Throws the engine's pending asynchronous error; returns when there is none.
  virtual void check_async_error() = 0;
  virtual void finalize() {}        // flush (ncclCommFinalize)
  virtual void abort() noexcept {}  // stop in-flight work now (ncclCommAbort)
  virtual void revoke() {}          // later operations fail (ncclCommRevoke)
};

// A split's membership, the same on every member: each member's (color, key) gathered through
// engine.exchange() (collective over the engine's members, kNoColor included), the members of
// `color` ordered by (key, rank). Throws InvalidArgument for a negative color other than kNoColor.
struct SplitMembers {
  std::vector<int> members;  // engine ranks of the new group, in the order of their new ranks
  int rank = -1;             // this member's new rank; -1 with kNoColor
};
SplitMembers split_members(InterNodeEngine& engine, int color, int key);

// The host backend's stand-in: a peerlink host Communicator named `id` among `size` processes of
// this machine (ids that are not node-scoped), running peerlink's host collectives and send/recv.
// Collective: every member constructs it with the same id. At most 8 members for reductions.
std::unique_ptr<InterNodeEngine> make_host_engine(const std::string& id, int rank, int size, const Options& opts);

// How an engine over all ranks of a new communicator is made: prepare() runs before the ranks
// agree (load a library: "" = ready, else why not), create() after every rank said ready.
struct EngineFactory {
  std::function<std::string()> prepare;
  std::function<std::unique_ptr<InterNodeEngine>()> create;
};

// ---- meeting ---------------------------------------------------------------------------------
// How the ranks of a communicator being created meet before any engine exists.
class Meeting {
 public:
  virtual ~Meeting() = default;
  // Every rank's host identity -> the node map (the same on every rank); throws naming the ranks
  // that did not come or what disagreed.
  virtual NodeMap meet() = 0;
  // Every rank says whether its part of the setup failed ("" = ready); returns "rank r (host): why"
  // for every rank that failed, the same list on every rank. Only after meet() found several nodes.
  virtual std::vector<std::string> agree(const std::string& my_error) = 0;
};

// libnccl.so.2's meeting: a small TCP service in the process that made the unique id, listening on
// Options::socket_ifname's address, which ranks reach through the bytes the id carries. It waits up
// to max(Options::timeout, 30 min) for a first rank, then Options::timeout for the others, checks
// what every rank sends (nranks agreement, rank range, duplicates, ranks of one node on one
// machine), answers every rank with the table or the same error, and exits once it served them.
constexpr size_t kRendezvousAddressBytes = 24;
using RendezvousAddress = std::array<uint8_t, kRendezvousAddressBytes>;
using JobNonce = std::array<uint8_t, 16>;
RendezvousAddress start_rendezvous(const JobNonce& nonce, const Options& opts);
// "host:port" of an address (for messages).
std::string describe_rendezvous(const RendezvousAddress& address);
std::unique_ptr<Meeting> connect_rendezvous(const RendezvousAddress& address, const JobNonce& nonce, int rank,
                                            int nranks, const Options& opts);

// ---- the multi-node communicator -------------------------------------------------------------
struct HierSetup {
  int rank = -1;
  int nranks = 0;
  int device = kHostDevice;
  // Unique among the jobs of this machine: the node communicators' ids derive from it and the node
  // index, so simulated nodes on one machine never share shared-memory names.
  std::string job_id;
  NodeMap map;
  Options opts;
};

class HierCommunicator {
 public:
  // Collective over setup.nranks ranks whose node map was met (setup.map has several nodes): the
  // node's peerlink Communicator, agreement through `meeting` (every rank's setup and
  // engine.prepare() reported; a failure anywhere fails every rank with the list), the world engine
  // from engine.create(), then the rails split from it.
  static std::unique_ptr<HierCommunicator> create(HierSetup setup, Meeting& meeting, const EngineFactory& engine);
  ~HierCommunicator();
  HierCommunicator(const HierCommunicator&) = delete;
  HierCommunicator& operator=(const HierCommunicator&) = delete;

  int rank() const;
  int nranks() const;
  int device() const;
  const NodeMap& map() const;
  const Options& options() const;
  const std::string& job_id() const;
  Communicator* node_comm();      // null with one rank per node
  InterNodeEngine& world();
  InterNodeEngine* rail();        // null where no two-level plan applies
  // For INFO logs: the node map and which plans apply.
  std::string describe() const;

  // Collectives with NCCL's semantics (in place as NCCL defines it). Each returns the path it took
  // (a fixed string, for logs): a two-level plan or the whole op on the world engine, and why.
  const char* allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, void* stream);
  const char* reduce_scatter(const void* send, void* recv, size_t recvcount, DataType dtype, ReduceOp op,
                             void* stream);
  const char* reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root, void* stream);
  const char* all_gather(const void* send, void* recv, size_t bytes, void* stream);
  const char* broadcast(const void* send, void* recv, size_t bytes, int root, void* stream);
  const char* all_to_all(const void* send, void* recv, size_t bytes_per_peer, void* stream);
  const char* gather(const void* send, void* recv, size_t bytes, int root, void* stream);
  const char* scatter(const void* send, void* recv, size_t bytes, int root, void* stream);
  // Sends and receives between group_start and group_end are issued together at group_end: first
  // every same-node pair on peerlink, then every other pair on the world engine, the same order on
  // every rank, so no pattern deadlocks. Outside a group each call is a group of its own. A peer may
  // be this rank (matched in order with a recv from itself in the same group).
  void group_start();
  void group_end();
  void send(int peer, const void* buf, size_t bytes, void* stream);
  void recv(int peer, void* buf, size_t bytes, void* stream);

  // Children (NCCL's split and shrink). A child inside one node is a plain peerlink Communicator
  // (`node_only`), one over several nodes a HierCommunicator; neither meets over the network: the
  // node map follows from this one's.
  struct Child {
    std::unique_ptr<HierCommunicator> hier;
    std::unique_ptr<Communicator> node_only;
    std::string job_id;
    int rank = -1;
    int nranks = 0;
  };
  // Collective over every rank of this communicator; kNoColor takes part and gets an empty Child.
  Child split(int color, int key, const Options& child_opts);
  // Called by the survivors (every rank not in `excluded`).
  Child shrink(const std::vector<int>& excluded, const Options& child_opts);

  // Throws the pending error of either side (peerlink's device-side errors, the engines').
  void check_async_error();
  void finalize();
  void abort() noexcept;  // wakes waits of other threads; in-flight engine work stopped
  void revoke();          // later operations fail

  struct Impl;

 private:
  explicit HierCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peerlink
