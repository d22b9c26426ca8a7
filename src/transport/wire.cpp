#include "transport/wire.h"

#include <cstring>

#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace peerlink::detail {

using common::cat;

Publication parse_publication(const RegRecord& r, uint32_t buf_id) {
  const gpu::MemHandle& h = r.handle;
  bool kind_ok = h.kind == gpu::HandleKind::HostShm || h.kind == gpu::HandleKind::DeviceIpc || gpu::is_fd_handle(h.kind);
  bool name_ok = h.kind != gpu::HandleKind::HostShm || std::memchr(h.data, 0, sizeof h.data) != nullptr;
  if (r.buf_id != buf_id || (r.state != kRegPublished && r.state != kRegRevoked) || r.version == 0 || r.len == 0 ||
      r.offset > h.alloc_bytes || r.len > h.alloc_bytes - r.offset || !kind_ok || !name_ok)
    throw Error(cat("malformed publication of buffer ", buf_id, ": id ", r.buf_id, ", state ", r.state, ", version ",
                    r.version, ", offset ", r.offset, ", len ", r.len, ", allocation ", h.alloc_bytes, " bytes, kind ",
                    static_cast<uint32_t>(h.kind), name_ok ? "" : ", unterminated segment name"));
  Publication p;
  p.buf_id = r.buf_id;
  p.version = r.version;
  p.offset = r.offset;
  p.len = r.len;
  p.handle = h;
  p.revoked = r.state == kRegRevoked;
  return p;
}

DescRecord parse_desc(const DescRecord& d, uint64_t seq, int peer) {
  if (d.seq != seq)
    throw Error(cat("descriptor of message ", seq, " from rank ", peer, " is missing (found ", d.seq, ")"));
  if (d.status > kStatusLast || d.offset > UINT64_MAX - d.len)
    throw Error(cat("descriptor of message ", seq, " from rank ", peer, " is malformed: status ", d.status, ", offset ",
                    d.offset, ", len ", d.len));
  return d;
}

void check_reply(const shm::RingMsg& m, uint64_t sent, int peer) {
  if (m.seq == 0 || m.seq > sent)
    throw Error(cat("rank ", peer, " sent a reply for message ", m.seq, ", but only ", sent,
                    " were sent (corrupted ring)"));
  if (m.type != kMsgCts && m.type != kMsgAck)
    throw Error(cat("unexpected message type ", m.type, " on the reply ring from rank ", peer));
  if (m.arg0 > kStatusLast) throw Error(cat("rank ", peer, " sent a reply with unknown status ", m.arg0));
}

void check_arrival(const shm::RingMsg& m, int peer) {
  if (m.type != kMsgRts && m.type != kMsgSendDone)
    throw Error(cat("unexpected message type ", m.type, " on the ring from rank ", peer));
  if (m.seq == 0 || m.offset > UINT64_MAX - m.len || m.arg0 > kStatusLast)
    throw Error(cat("malformed message from rank ", peer, ": seq ", m.seq, ", offset ", m.offset, ", len ", m.len,
                    ", status ", m.arg0));
}

void check_relay_geometry(uint64_t slots, uint64_t chunk, size_t payload, const std::string& name) {
  bool ok = slots > 0 && slots <= 64 && chunk > 0 && chunk <= (uint64_t(1) << 40) &&
            RelayView::bytes(slots, chunk) <= payload;
  if (!ok) throw Error(cat("relay segment ", name, " has invalid geometry: ", slots, " slots of ", chunk, " bytes"));
}

bool relay_meta_valid(const RelaySlotMeta& m, uint64_t chunk) {
  return m.seq != 0 && m.bytes <= chunk && m.msg_offset <= m.msg_len && m.bytes <= m.msg_len - m.msg_offset &&
         m.dst_offset <= UINT64_MAX - m.msg_len && m.last <= 1 && m.status <= kStatusLast;
}

JoinRecord parse_join(const void* bytes, size_t n, int rank) {
  JoinRecord j;
  if (n < sizeof j) throw Error(cat("join record of rank ", rank, " is ", n, " bytes, expected ", sizeof j));
  std::memcpy(&j, bytes, sizeof j);
  bool pref_ok = j.completion_pref <= static_cast<uint32_t>(Completion::Ring);
  bool bus_ok = std::memchr(j.pci_bus_id, 0, sizeof j.pci_bus_id) != nullptr;
  if (j.magic != kJoinMagic || j.version != kJoinVersion || j.device < -1 || !pref_ok || !bus_ok)
    throw Error(cat("join record of rank ", rank, " is malformed (magic ", j.magic, ", version ", j.version, ", device ",
                    j.device, ", completion ", j.completion_pref, bus_ok ? "" : ", unterminated bus id",
                    "): another peerlink version?"));
  return j;
}

const char* status_text(uint64_t s) {
  switch (s) {
    case kStatusMismatch: return "its matching irecv names a different (buffer, offset, len)";
    case kStatusUnknownBuffer: return "the buffer id is not published";
    case kStatusBounds: return "the range exceeds the published buffer";
    case kStatusCancelled: return "the sender gave the message up (its call failed)";
    case kStatusRevoked: return "the buffer was freed by its owner";
    default: return "unknown status";
  }
}

}  // namespace peerlink::detail
