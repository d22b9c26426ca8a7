// Writes the seed corpora of the transport's fuzz targets (valid records) into
// tests/fuzz/corpus/{registry_record,transport_wire}/. Not part of any build; regenerate with
//   g++ -std=c++17 -Iinclude -Isrc tests/fuzz/transport_seeds.cpp -o /tmp/seeds && /tmp/seeds
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "transport/wire.h"

using namespace peerlink::detail;

static void write(const std::string& path, const std::vector<unsigned char>& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return void(std::perror(path.c_str()));
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}
template <class... T>
static std::vector<unsigned char> bytes(unsigned char sel, bool with_sel, const T&... parts) {
  std::vector<unsigned char> b;
  if (with_sel) b.push_back(sel);
  auto add = [&](const auto& x) {
    const auto* p = reinterpret_cast<const unsigned char*>(&x);
    b.insert(b.end(), p, p + sizeof x);
  };
  (add(parts), ...);
  return b;
}

int main() {
  const std::string reg = "tests/fuzz/corpus/registry_record/", wire = "tests/fuzz/corpus/transport_wire/";
  RegRecord r;
  r.buf_id = 7;
  r.state = kRegPublished;
  r.version = 1;
  r.offset = 256;
  r.len = 1024;
  r.handle.kind = peerlink::gpu::HandleKind::HostShm;
  r.handle.owner_pid = 4242;
  r.handle.alloc_id = 3;
  r.handle.alloc_bytes = 4096;
  std::strcpy(reinterpret_cast<char*>(r.handle.data), "pl_job_1a2b3c4d_0badcafe_r1_m3");
  uint32_t id = 7;
  write(reg + "host_publication", bytes(0, false, r, id));
  r.state = kRegRevoked;
  write(reg + "revoked_publication", bytes(0, false, r, id));
  r.state = kRegPublished;
  r.handle.kind = peerlink::gpu::HandleKind::DeviceIpc;
  r.offset = 0;
  r.len = 4096;
  write(reg + "device_publication", bytes(0, false, r, id));

  DescRecord d{12, 7, kStatusOk, 64, 128};
  uint64_t seq = 12;
  write(wire + "desc", bytes(0, true, d, seq));
  d.status = kStatusCancelled;
  write(wire + "desc_cancelled", bytes(0, true, d, seq));
  peerlink::shm::RingMsg ack{kMsgAck, 7, 5, 0, 0, 0, kStatusOk, 0, 0}, cts{kMsgCts, 7, 5, 0, 0, 1, kStatusOk, 0, 0};
  uint64_t sent = 9;
  write(wire + "reply_ack", bytes(1, true, ack, sent));
  write(wire + "reply_cts", bytes(1, true, cts, sent));
  peerlink::shm::RingMsg rts{kMsgRts, 7, 3, 64, 128, 0, 0, 0, 0}, done{kMsgSendDone, 7, 4, 64, 128, 1, kStatusOk, 0, 0};
  write(wire + "arrival_rts", bytes(2, true, rts));
  write(wire + "arrival_send_done", bytes(2, true, done));
  RelaySlotMeta m{3, 4096, 4096, 10000, 0, 1, 7, 0, kStatusOk, 0};
  uint64_t chunk = 4096, slots = 4, payload = RelayView::bytes(4, 4096);
  write(wire + "relay_meta", bytes(3, true, m, chunk, slots, payload));
  m = RelaySlotMeta{3, 8192, 0, 10000, 0, 1, 7, 1, kStatusCancelled, 0};
  write(wire + "relay_meta_abort", bytes(3, true, m, chunk, slots, payload));
  JoinRecord j;
  j.magic = kJoinMagic;
  j.version = kJoinVersion;
  j.device = 0;
  j.completion_pref = 1;
  std::strcpy(j.pci_bus_id, "0000:1b:00.0");
  write(wire + "join_gpu", bytes(4, true, j));
  j.device = -1;
  j.pci_bus_id[0] = 0;
  write(wire + "join_host", bytes(4, true, j));
  return 0;
}
