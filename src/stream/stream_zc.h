// NCCL-form zero-copy between processes, host side (GPU communicators; device side:
// stream_direct_device.h). One per stream engine.
//
// Why: between two processes a staged NCCL-form message crosses NVLink into the receiver's staging
// slots and is copied out again: 256 MB one way took 772-778 us on 2x H100, against
// 696 us for the published form, which writes straight into the receiver's buffer. NCCL programs
// (torch.distributed send/recv, pipeline stages) name arbitrary receive buffers, so the library
// exports them itself.
//
// Receiver (offer): the allocation holding a recv's buffer is exported to the sender under the
// reserved buffer id kZcBufBase + slot (one slot per allocation and peer, never reused; identity =
// base, size and the driver's allocation id, so a freed and reallocated range gets a new slot; when
// the kZcSlots slots are used up, later allocations are staged, as are allocations the backend does
// not export, e.g. VMM memory without a shareable handle). The recv then carries (slot,
// offset); its kernel posts it only once the sender acknowledged the slot, else the message is
// staged as before. No export is made while the recv's stream is being captured.
// Sender (poll, fill, committed): at a large NCCL-form send, outside a capture, it maps every slot
// the peer published since (without waiting); the next launch enters them in this rank's private table
// (device memory no peer can write) and acknowledges them in the peer's area. The sender's kernel
// never waits for its host: a post that names a slot the table lacks is a protocol error, and a
// receiver only names acknowledged slots.
// Only messages of at least Options::stream_direct_ipc_min bytes are candidates: the sender waits for
// the receiver's post before it moves a byte, which costs more than the copy-out it saves below
// ~16 MB (measurements: options.h). A buffer's first message is staged, and zero-copy starts with
// the sender's next large send after the export; a program that only replays graphs after its
// first capture keeps the staged path for buffers it never used eagerly.
// Mappings stay open until the engine is destroyed (a peer's freed allocation stays reserved in
// this process until then: at most kZcSlots per peer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/owners.h"
#include "stream/stream_launch.h"

namespace peerlink::detail {

class CommServices;

class StreamZeroCopy {
 public:
  StreamZeroCopy(CommServices& comm, int world);
  StreamZeroCopy(const StreamZeroCopy&) = delete;
  StreamZeroCopy& operator=(const StreamZeroCopy&) = delete;

  // Receiver: the zero-copy slot of dst's allocation for peer (exported now when new and
  // `may_export`), *offset dst's offset in it; -1: stage this recv.
  int offer(int peer, const void* dst, size_t len, bool may_export, uint64_t* offset);
  // Receiver: a kernel found `slot` acknowledged (so its recvs go zero-copy from now on).
  bool seen(int peer, int slot) const;
  // Sender: maps the slots peer published since the last poll (non-blocking).
  void poll(int peer);
  // Sender: this rank mapped at least one of peer's slots (its large sends likely go zero-copy).
  bool bound_any(int peer) const { return bound_[size_t(peer)] > 0; }

  // The table and seen flags every launch carries; with `binds`, also up to kMaxLaunchBinds of the
  // binds no launch wrote yet (remote[q]: section `rank` of q's area). committed(n) drops the
  // first n once the launch that carries them was enqueued.
  void fill(stream::StreamLaunchHeader& L, const std::vector<stream::PairSection*>& remote, bool binds) const;
  void committed(int n);

  // Tests and logs: slots of peer that a recv found acknowledged.
  int seen_count(int peer) const;

 private:
  struct Export {  // an allocation's identity (a freed and reallocated range differs in alloc_id)
    const char* base;
    size_t bytes;
    uint64_t alloc_id;
    bool operator==(const Export& o) const { return base == o.base && bytes == o.bytes && alloc_id == o.alloc_id; }
  };
  struct Pending {
    int peer;
    int slot;
    uint64_t base, size;
  };
  CommServices& comm_;
  gpu::DeviceAlloc table_;      // ZcEntry [world][kZcSlots], this rank's, zeroed
  gpu::MappedHostAlloc seen_;   // uint8_t [world][kZcSlots], written by this rank's kernels
  std::vector<std::vector<Export>> exports_;  // [peer][slot] (receiver)
  std::vector<std::vector<Export>> refused_;  // [peer]: allocations whose export failed (at most kZcSlots)
  std::vector<int> bound_;                    // [peer]: slots of peer mapped so far (sender)
  std::vector<std::shared_ptr<void>> holds_;  // their mappings
  std::vector<Pending> pending_;              // bound, not yet written by a launch
};

}  // namespace peerlink::detail
