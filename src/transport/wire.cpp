#include "transport/wire.h"

#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace peerlink::detail {

Publication parse_publication(const RegRecord& r, uint32_t buf_id) {
  const gpu::MemHandle& h = r.handle;
  bool kind_ok = h.kind == gpu::HandleKind::HostShm || h.kind == gpu::HandleKind::DeviceIpc || gpu::is_fd_handle(h.kind);
  bool name_ok = h.kind != gpu::HandleKind::HostShm || std::memchr(h.data, 0, sizeof h.data) != nullptr;
  if (r.buf_id != buf_id || (r.state != kRegPublished && r.state != kRegRevoked) || r.version == 0 || r.len == 0 ||
      r.offset > h.alloc_bytes || r.len > h.alloc_bytes - r.offset || !kind_ok || !name_ok)
    throw Error(
        common::format("malformed publication of buffer {}: id {}, state {}, version {}, offset {}, len {}, allocation "
                       "{} bytes, kind {}{}",
                       buf_id, r.buf_id, r.state, r.version, r.offset, r.len, h.alloc_bytes,
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
    throw Error(common::format("descriptor of message {} from rank {} is missing (found {})", seq, peer, d.seq));
  if (d.status > kStatusLast || d.offset > UINT64_MAX - d.len)
    throw Error(common::format("descriptor of message {} from rank {} is malformed: status {}, offset {}, len {}", seq,
                               peer, d.status, d.offset, d.len));
  return d;
}

void check_reply(const shm::RingMsg& m, uint64_t sent, int peer) {
  if (m.seq == 0 || m.seq > sent)
    throw Error(common::format("rank {} sent a reply for message {}, but only {} were sent (corrupted ring)", peer,
                               m.seq, sent));
  if (m.type != kMsgCts && m.type != kMsgAck)
    throw Error(common::format("unexpected message type {} on the reply ring from rank {}", m.type, peer));
  if (m.arg0 > kStatusLast) throw Error(common::format("rank {} sent a reply with unknown status {}", peer, m.arg0));
}

void check_arrival(const shm::RingMsg& m, int peer) {
  if (m.type != kMsgRts && m.type != kMsgSendDone)
    throw Error(common::format("unexpected message type {} on the ring from rank {}", m.type, peer));
  if (m.seq == 0 || m.offset > UINT64_MAX - m.len || m.arg0 > kStatusLast)
    throw Error(common::format("malformed message from rank {}: seq {}, offset {}, len {}, status {}", peer, m.seq,
                               m.offset, m.len, m.arg0));
}

void check_relay_geometry(uint64_t slots, uint64_t chunk, size_t payload, const std::string& name) {
  bool ok = slots > 0 && slots <= 64 && chunk > 0 && chunk <= (uint64_t(1) << 40) &&
            RelayView::bytes(slots, chunk) <= payload;
  if (!ok)
    throw Error(common::format("relay segment {} has invalid geometry: {} slots of {} bytes", name, slots, chunk));
}

bool relay_meta_valid(const RelaySlotMeta& m, uint64_t chunk) {
  return m.seq != 0 && m.bytes <= chunk && m.msg_offset <= m.msg_len && m.bytes <= m.msg_len - m.msg_offset &&
         m.dst_offset <= UINT64_MAX - m.msg_len && m.last <= 1 && m.status <= kStatusLast;
}

JoinRecord parse_join(const void* bytes, size_t n, int rank) {
  JoinRecord j;
  if (n < sizeof j) throw Error(common::format("join record of rank {} is {} bytes, expected {}", rank, n, sizeof j));
  std::memcpy(&j, bytes, sizeof j);
  bool pref_ok = j.completion_pref <= static_cast<uint32_t>(Completion::Ring);
  bool bus_ok = std::memchr(j.pci_bus_id, 0, sizeof j.pci_bus_id) != nullptr;
  if (j.magic != kJoinMagic || j.version != kJoinVersion || j.device < -1 || !pref_ok || !bus_ok)
    throw Error(
        common::format("join record of rank {} is malformed (magic {}, version {}, device {}, completion {}{}): "
                       "another peerlink version?",
                       rank, j.magic, j.version, j.device, j.completion_pref, bus_ok ? "" : ", unterminated bus id"));
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
