// One peerlink communicator of a process group: the group's ranks on one device kind (a CUDA
// device, or the host backend for CPU tensors), and where its calls run. Within one node it is a
// peerlink Communicator, across nodes a HierCommunicator (group_comm.h).
//
// Streams, as ProcessGroupNCCL: a synchronous call runs on the caller's current stream; an
// asynchronous one on the communicator's internal stream (one from torch's pool), which first waits
// for the current stream, so it sees everything queued before the call. Calls of one communicator
// must run on the device in the order they were issued (stream send/recv channels read their
// counters when the kernel starts, stream_p2p.h), so a call on another stream than the previous
// call waits for it: with an event recorded after the previous call inside a capture (events
// cannot cross a capture's boundary), or, outside one, recorded on the previous stream when the
// stream changes (nothing is recorded while calls stay on one stream).
#pragma once
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <memory>
#include <mutex>
#include <optional>

#include "group_comm.h"

namespace peerlink::pt {

class DeviceComm;

// torch's CUDA runtime behind its device-generic interface: the extension names no CUDA function
// itself, so it needs no CUDA headers and no libcudart of its own.
const c10::impl::VirtualGuardImpl& cuda_impl();

// Where one call runs.
struct Launch {
  DeviceComm* dc = nullptr;
  std::optional<c10::Stream> stream;  // CUDA: the stream the call is enqueued on; host: none
  void* raw = nullptr;                // its native handle (cudaStream_t), nullptr on the host
  bool async = false;                 // on the internal stream
  bool capturing = false;             // the stream is being captured into a CUDA graph
};

class DeviceComm {
 public:
  DeviceComm(std::unique_ptr<GroupComm> comm, c10::Device device);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  GroupComm& comm() { return *comm_; }
  const c10::Device& device() const { return device_; }
  bool is_host() const { return device_.is_cpu(); }
  std::mutex& mutex() { return mu_; }  // one call at a time issues on this communicator

  // Picks the stream of a call (current, or the internal one forked off it) and orders it after
  // this communicator's previous launch. Caller holds mutex().
  Launch begin(bool async);
  // After the call's launches: remembers the stream (and, inside a capture, an event after them).
  void end(const Launch& l);

  // Marks that collectives / stream point-to-point ran here (so their error state exists).
  void used_collectives() { coll_used_ = true; }
  void used_p2p() { p2p_used_ = true; }
  // Throws the error the device recorded for earlier calls (a bounded wait that ran out, a lost
  // peer), translated as errors.h says. Reads mapped host words only: legal during a capture.
  void check_errors(const char* what);

  // Synchronizes the current and internal streams of the device (the host blocks: barrier and close).
  void synchronize_streams();
  // Closes the communicator (every later call of it fails). drain: first waits for the calls
  // already queued on the device (they use its memory); abort does not.
  void close(bool drain);

 private:
  std::unique_ptr<GroupComm> comm_;
  c10::Device device_;
  std::mutex mu_;
  std::optional<c10::Stream> internal_;
  std::optional<c10::Stream> last_;  // stream of the previous launch
  void order_after_last(const c10::Stream& s, bool capturing, bool forked_after_last);

  std::unique_ptr<c10::Event> fork_;          // the internal stream waits for the current one on it
  std::unique_ptr<c10::Event> join_;          // outside a capture: a stream switch waits on it
  std::unique_ptr<c10::Event> capture_join_;  // recorded after the previous launch inside a capture
  bool last_in_capture_ = false;              // the previous launch was captured
  bool closed_ = false;
  bool coll_used_ = false;
  bool p2p_used_ = false;
};

}  // namespace peerlink::pt
