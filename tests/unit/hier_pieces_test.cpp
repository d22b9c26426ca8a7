// Unit tests of the multi-node layer's pieces: the node map (layouts, rails, subsets), host
// identity and node-carrying unique ids, NCCL_SOCKET_IFNAME matching, the rendezvous wire format
// (round trips, and every malformed input refused with a reason), and the rendezvous itself with
// ranks as threads (one node, two nodes and the agreement, nranks disagreement, a duplicate rank,
// a missing rank, a stranger's bytes on the port).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "bootstrap/host_identity.h"
#include "hier/rendezvous_wire.h"
#include "hier/socket_util.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"

using namespace peerlink;
using namespace peerlink::hier;

TEST(HierNodeMap, LayoutsRailsAndSubsets) {
  NodeMap c({7, 7, 9, 9}, {"a", "b"});
  EXPECT_EQ(c.nodes(), 2);
  EXPECT_TRUE(c.uniform());
  EXPECT_TRUE(c.node_contiguous());
  EXPECT_EQ(c.node_of(2), 1);
  EXPECT_EQ(c.local_rank(3), 1);
  EXPECT_EQ(c.rail(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(c.describe(), "2 nodes x 2 ranks, node-contiguous: node 0 (a) ranks 0,1; node 1 (b) ranks 2,3");
  NodeMap rr({9, 7, 9, 7});  // nodes in order of first rank: node 0 is host 9
  EXPECT_EQ(rr.host_of_node(0), 9u);
  EXPECT_FALSE(rr.node_contiguous());
  EXPECT_TRUE(rr.uniform());
  EXPECT_EQ(rr.ranks_of_node(1), (std::vector<int>{1, 3}));
  NodeMap uneven({1, 1, 1, 2});
  EXPECT_FALSE(uneven.uniform());
  EXPECT_EQ(uneven.rail(2), (std::vector<int>{2}));
  NodeMap sub = c.subset({3, 1, 0});  // child rank 0 = parent 3 (node b)
  EXPECT_EQ(sub.nodes(), 2);
  EXPECT_EQ(sub.name_of_node(0), "b");
  EXPECT_EQ(sub.ranks_of_node(1), (std::vector<int>{1, 2}));
  EXPECT_EQ(c.subset({0, 1}).nodes(), 1);
  EXPECT_THROW(c.node_of(4), InvalidArgument);
  EXPECT_THROW(c.subset({5}), InvalidArgument);
  EXPECT_THROW(NodeMap({1, 2}, {"only one"}), InvalidArgument);
}

TEST(HierHostIdentity, ConfiguredIdsAndNodeUniqueIds) {
  bootstrap::HostIdentity a = bootstrap::host_identity("rack3-node7"), b = bootstrap::host_identity("");
  EXPECT_EQ(a.name, "rack3-node7");
  EXPECT_NE(a.node, b.node);
  EXPECT_EQ(a.machine, b.machine);  // one kernel
  EXPECT_EQ(bootstrap::host_identity("rack3-node7").node, a.node);
  Options o;
  o.host_id = "x";
  EXPECT_EQ(host_id(o), bootstrap::host_identity("x").node);
  std::string id = make_unique_id(o);
  uint64_t node = 0;
  std::string name;
  ASSERT_TRUE(bootstrap::parse_node_unique_id(id, &node, &name)) << id;
  EXPECT_EQ(node, host_id(o));
  EXPECT_EQ(name, "x");
  EXPECT_NE(make_unique_id(o), id);
  EXPECT_FALSE(bootstrap::parse_node_unique_id("my-job-42", &node, &name));
  EXPECT_FALSE(bootstrap::parse_node_unique_id("pl-0123456789abcdef@h.0123", &node, &name));
}

// A Communicator refuses at once an id made on another node, naming both; a rendezvous that times
// out says what a rank on another host means.
TEST(HierHostIdentity, CommunicatorRefusesAnotherNodesId) {
  Options a, b;
  a.host_id = "node-a";
  b.host_id = "node-b";
  b.timeout = std::chrono::milliseconds(300);
  std::string id = make_unique_id(a);
  auto t0 = std::chrono::steady_clock::now();
  try {
    Communicator c(id, 0, 2, kHostDevice, b);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'node-b'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'node-a'"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  a.timeout = std::chrono::milliseconds(300);
  try {
    Communicator c(id, 0, 2, kHostDevice, a);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks on other hosts cannot join it"), std::string::npos) << e.what();
  }
}

TEST(HierSockets, IfnameSpecs) {
  EXPECT_TRUE(ifname_matches("eth", "eth0"));
  EXPECT_FALSE(ifname_matches("eth", "ib0"));
  EXPECT_TRUE(ifname_matches("ib,eth", "eth1"));
  EXPECT_FALSE(ifname_matches("^docker,lo", "lo"));
  EXPECT_TRUE(ifname_matches("^docker,lo", "eth0"));
  EXPECT_TRUE(ifname_matches("=eth0", "eth0"));
  EXPECT_FALSE(ifname_matches("=eth0", "eth01"));
  EXPECT_FALSE(ifname_matches("", "eth0"));
  std::string ifname;
  SockAddr lo = pick_listen_address("lo", &ifname);
  EXPECT_EQ(ifname, "lo");
  RendezvousAddress packed = pack_address(lo);
  SockAddr back;
  EXPECT_EQ(unpack_address(packed, &back), "port 0");  // unbound: no port yet
  packed[1] = 0x12;
  EXPECT_EQ(unpack_address(packed, &back), "");
  packed[0] = 5;
  EXPECT_NE(unpack_address(packed, &back), "");
  EXPECT_THROW(pick_listen_address("no-such-interface", &ifname), InvalidArgument);
}

TEST(HierWire, RoundTripsAndRefusals) {
  Hello h;
  std::memset(h.nonce, 3, 16);
  h.rank = 2;
  h.nranks = 4;
  h.host = 0x1122334455667788ULL;
  h.machine = 5;
  h.pid = 77;
  h.name = "node\x01x";
  h.hostname = std::string(200, 'h');
  std::vector<uint8_t> b = encode_hello(h);
  ASSERT_EQ(b.size(), kHelloBytes);
  Hello g;
  ASSERT_EQ(parse_hello(b.data(), b.size(), &g), "");
  EXPECT_EQ(g.rank, 2);
  EXPECT_EQ(g.host, h.host);
  EXPECT_EQ(g.name, "node?x");  // not printable: replaced
  EXPECT_EQ(g.hostname.size(), kNameBytes - 1);
  EXPECT_NE(parse_hello(b.data(), b.size() - 1, &g), "");
  b[0] ^= 1;
  EXPECT_NE(parse_hello(b.data(), b.size(), &g).find("magic"), std::string::npos);
  h.rank = 4;
  b = encode_hello(h);
  EXPECT_NE(parse_hello(b.data(), b.size(), &g).find("rank 4"), std::string::npos);

  Table t;
  t.node_of = {0, 0, 1, 1};
  t.nodes = {{10, 1, "a"}, {11, 1, "b"}};
  std::vector<uint8_t> tb = encode_table(t);
  Table u;
  ASSERT_EQ(parse_table(tb.data(), tb.size(), 4, &u), "");
  EXPECT_EQ(u.nodes[1].name, "b");
  EXPECT_NE(parse_table(tb.data(), tb.size(), 3, &u), "");      // not our nranks
  EXPECT_NE(parse_table(tb.data(), tb.size() - 1, 4, &u), "");  // truncated
  t.node_of = {1, 1, 0, 0};                                     // nodes out of first-rank order
  tb = encode_table(t);
  EXPECT_NE(parse_table(tb.data(), tb.size(), 4, &u).find("first appears"), std::string::npos);
  t.node_of = {0, 0, 2, 1};  // a node index past the count
  tb = encode_table(t);
  EXPECT_NE(parse_table(tb.data(), tb.size(), 4, &u), "");
  t.node_of = {0, 0, 1, 1};
  t.nodes[1].host = 10;  // one host id on two nodes
  tb = encode_table(t);
  EXPECT_NE(parse_table(tb.data(), tb.size(), 4, &u).find("one host id"), std::string::npos);

  std::vector<uint8_t> m = encode_message(Kind::Status, encode_status({3, FailCode::Timeout, "slow"}));
  Kind k;
  uint32_t len = 0;
  ASSERT_EQ(parse_header(m.data(), m.size(), &k, &len), "");
  EXPECT_EQ(k, Kind::Status);
  Status s;
  ASSERT_EQ(parse_status(m.data() + kHeaderBytes, len, 4, &s), "");
  EXPECT_EQ(s.message, "slow");
  EXPECT_NE(parse_status(m.data() + kHeaderBytes, len, 3, &s), "");  // rank 3 of 3
  std::vector<VerdictEntry> v = {{1, FailCode::Invalid, "x"}, {3, FailCode::PeerLost, "y"}}, w;
  std::vector<uint8_t> vb = encode_verdict(v);
  ASSERT_EQ(parse_verdict(vb.data(), vb.size(), 4, &w), "");
  EXPECT_EQ(w[1].message, "y");
  EXPECT_NE(parse_verdict(vb.data(), vb.size(), 2, &w), "");       // rank 3 of 2
  EXPECT_NE(parse_verdict(vb.data(), vb.size() + 0 - 1, 4, &w), "");  // truncated
  m[8] = 0xff, m[9] = 0xff, m[10] = 0xff, m[11] = 0x7f;             // a body of 2 GB
  EXPECT_NE(parse_header(m.data(), m.size(), &k, &len), "");
}

namespace {

// Ranks as threads meeting through a fresh rendezvous; returns each rank's map or error.
struct Outcome {
  NodeMap map;
  std::string error;
  std::vector<std::string> agreed;
};
std::vector<Outcome> meet(int nranks, const std::vector<std::string>& hosts, std::vector<int> ranks_called = {},
                          std::vector<int> nranks_said = {}, const std::vector<std::string>& fail_setup = {}) {
  Options o;
  o.timeout = std::chrono::milliseconds(1500);
  o.socket_ifname = "lo";
  JobNonce nonce{};
  nonce[0] = 42;
  RendezvousAddress addr = start_rendezvous(nonce, o);
  if (ranks_called.empty())
    for (int r = 0; r < nranks; ++r) ranks_called.push_back(r);
  std::vector<Outcome> out(ranks_called.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < ranks_called.size(); ++i)
    ts.emplace_back([&, i] {
      Options mine = o;
      int r = ranks_called[i];
      mine.host_id = hosts[i];
      try {
        auto m = connect_rendezvous(addr, nonce, r, nranks_said.empty() ? nranks : nranks_said[i], mine);
        out[i].map = m->meet();
        if (out[i].map.nodes() > 1) out[i].agreed = m->agree(fail_setup.empty() ? "" : fail_setup[i]);
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return out;
}

}  // namespace

TEST(HierRendezvous, OneNodeTwoNodesAndAgreement) {
  auto one = meet(3, {"h", "h", "h"});
  for (const Outcome& o : one) {
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(o.map.nodes(), 1);
  }
  auto two = meet(4, {"a", "b", "a", "b"}, {}, {}, {"", "", "", "disk on fire"});
  for (const Outcome& o : two) {
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(o.map.describe(), two[0].map.describe());
    EXPECT_EQ(o.map.nodes(), 2);
    EXPECT_FALSE(o.map.node_contiguous());
    ASSERT_EQ(o.agreed.size(), 1u);
    EXPECT_NE(o.agreed[0].find("rank 3"), std::string::npos);
    EXPECT_NE(o.agreed[0].find("disk on fire"), std::string::npos);
  }
}

TEST(HierRendezvous, DisagreementDuplicatesAndMissingRanks) {
  auto bad_n = meet(2, {"a", "a"}, {0, 1}, {2, 3});
  for (const Outcome& o : bad_n) EXPECT_NE(o.error.find("nranks"), std::string::npos) << o.error;
  auto dup = meet(3, {"a", "a", "a"}, {0, 1, 1});
  for (const Outcome& o : dup) EXPECT_NE(o.error.find("rank 1 arrived twice"), std::string::npos) << o.error;
  auto t0 = std::chrono::steady_clock::now();
  auto missing = meet(3, {"a", "b"}, {0, 2});
  for (const Outcome& o : missing) EXPECT_NE(o.error.find("ranks 1 of 3 did not reach"), std::string::npos) << o.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Bytes that are not a hello (a port scanner, another program) get an answer and are dropped; the
// ranks are served as if they had not come.
TEST(HierRendezvous, StrangerOnThePort) {
  Options o;
  o.timeout = std::chrono::milliseconds(3000);
  o.socket_ifname = "lo";
  JobNonce nonce{};
  RendezvousAddress addr = start_rendezvous(nonce, o);
  SockAddr a;
  ASSERT_EQ(unpack_address(addr, &a), "");
  std::string why;
  Fd junk = connect_until(a, Clock::now() + std::chrono::seconds(2), &why);
  ASSERT_TRUE(junk) << why;
  std::vector<uint8_t> garbage(kHelloBytes, 0xab);
  ASSERT_EQ(write_all(junk.get(), garbage.data(), garbage.size(), Clock::now() + std::chrono::seconds(2)), IoResult::Ok);
  uint8_t header[kHeaderBytes];
  ASSERT_EQ(read_exact(junk.get(), header, sizeof header, Clock::now() + std::chrono::seconds(2)), IoResult::Ok);
  Kind k;
  uint32_t len;
  ASSERT_EQ(parse_header(header, sizeof header, &k, &len), "");
  EXPECT_EQ(k, Kind::Failure);
  JobNonce other = nonce;
  other[3] = 1;  // another job's id
  EXPECT_THROW(connect_rendezvous(addr, other, 0, 1, o)->meet(), InvalidArgument);
  auto m = connect_rendezvous(addr, nonce, 0, 1, o);
  EXPECT_EQ(m->meet().nodes(), 1);
}
