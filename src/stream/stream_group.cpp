// Stream engine: groups (ops queued until group_end, then run as one batch), the pairing of a
// group's sends to and recvs from this rank itself, and the per-peer broken state an op that failed
// leaves behind (stream_p2p.h).
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "stream/stream_p2p.h"

namespace peerlink::detail {

using namespace peerlink::stream;

void StreamEngine::group_start() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (in_group_)
    throw InvalidArgument(common::format(
        "group_start: a group is already open on this communicator (rank {}, {} operations queued); groups do not nest",
        state_.rank, group_.size()));
  in_group_ = true;
}

void StreamEngine::group_end() {
  std::lock_guard<std::recursive_mutex> g(mu_);
  if (!in_group_) throw InvalidArgument(common::format("group_end without group_start (rank {})", state_.rank));
  // The group ends here even when it reports an error (as ncclGroupEnd does): a caller that catches
  // the error can open the next group. Seen on 2x H200: a device error reported by group_end left the
  // group open and the next group_start failed.
  in_group_ = false;
  std::vector<StreamOp> ops;
  ops.swap(group_);
  match_self(ops);                // unmatched or mismatched self calls: nothing of this group runs
  runner_->check_device_error();  // an earlier op failed on the device: nothing of this group runs
  if (!ops.empty()) run(ops);
}

void StreamEngine::queue_self(StreamOp op) {
  const bool send = op.kind == StreamOpKind::SendRaw;
  if (!in_group_)
    throw InvalidArgument(
        common::format("{} rank {} (this rank itself, {} bytes) outside a group: it completes only together with its "
                       "matching {} inside one group_start / group_end",
                       send ? "send to" : "recv from", state_.rank, op.len, send ? "recv" : "send"));
  (send ? self_sends_ : self_recvs_).push_back(std::move(op));
}

// Pairs this group's self sends with its self recvs in call order (FIFO, as any pair's channel) into
// copies (StreamRunner::add_self_copy: the host backend copies them here, synchronous as every host
// call is; GPUs queue LocalCopy ops).
void StreamEngine::match_self(std::vector<StreamOp>& ops) {
  std::vector<StreamOp> sends, recvs;
  sends.swap(self_sends_);
  recvs.swap(self_recvs_);
  if (sends.size() != recvs.size())
    throw InvalidArgument(
        common::format("group_end: {} send(s) to this rank itself (rank {}) but {} recv(s) from it; each needs its "
                       "match in the same group",
                       sends.size(), state_.rank, recvs.size()));
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].len != recvs[i].len)
      throw InvalidArgument(
          common::format("group_end: send {} to this rank itself (rank {}) has {} bytes, its matching recv {}", i,
                         state_.rank, sends[i].len, recvs[i].len));
    if (sends[i].stream != recvs[i].stream)
      throw UnsupportedError(
          common::format("group_end: send {} to this rank itself (rank {}) and its matching recv are on different "
                         "streams; issue both on one stream",
                         i, state_.rank));
  }
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i].len != 0 && sends[i].src != recvs[i].dst) runner_->add_self_copy(ops, sends[i], recvs[i]);
}

void StreamEngine::submit(StreamOp op) {
  if (in_group_) {
    group_.push_back(std::move(op));
    return;
  }
  std::vector<StreamOp> ops;
  ops.push_back(std::move(op));
  run(ops);
}

void StreamEngine::run(std::vector<StreamOp>& ops) {
  // A peer broken by an earlier op of this batch: refuse the batch before anything moves.
  for (const StreamOp& op : ops)
    if (state_.broken[op.peer]) std::rethrow_exception(state_.broken[op.peer]);
  try {
    runner_->run(ops);
  } catch (const InvalidArgument&) {
    throw;  // a mismatch reported after the batch completed: the channels are consistent
  } catch (...) {
    mark_broken(ops, std::current_exception());
    throw;
  }
}

void StreamEngine::mark_broken(const std::vector<StreamOp>& ops, std::exception_ptr e) {
  for (const StreamOp& op : ops)
    if (!op.done && op.peer != state_.rank && !state_.broken[op.peer]) state_.broken[op.peer] = e;
}

}  // namespace peerlink::detail
