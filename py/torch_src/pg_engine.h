// The engine between nodes of a process group spanning nodes (peerlink/multinode.h
// InterNodeEngine): a torch backend over the engine's members, made by the maker that
// peerlink.torch passes: ProcessGroupNCCL for CUDA tensors (the real NCCL, as the multi-node layer
// wants between nodes), ProcessGroupGloo for CPU tensors. Calls run on the current stream, which
// the caller sets to the launch's: the backend's Work::wait() makes that stream wait for the
// backend's own (ProcessGroupNCCL) or blocks until done (gloo), so every phase stays ordered on
// the caller's stream. Control data (exchange, split) goes through the group's store.
#pragma once
#include <memory>
#include <string>

#include "group_comm.h"
#include "peerlink/multinode.h"

namespace peerlink::pt {

struct PgEngineSetup {
  c10::intrusive_ptr<c10d::Store> store;  // the group's store
  std::string prefix;                     // this engine's keys in it (children: below it)
  c10::Device device{c10::DeviceType::CPU};
  BackendMaker make_backend;
};

// Collective over `size` ranks: the backend over them (made here), initialized by one collective
// so that later point-to-point calls between some of its ranks need no others.
std::unique_ptr<InterNodeEngine> make_pg_engine(const PgEngineSetup& setup, int rank, int size);

}  // namespace peerlink::pt
