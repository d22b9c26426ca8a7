#include "transport/caller_progress.h"

#include "transport/transport.h"

namespace peerlink::detail {

bool PairProgress::poll() {
  if (!enter()) return false;
  const bool moved = t_.progress_on_caller(p_, side_ == Side::Recv);
  leave();
  return moved;
}

// Measured, host, 8 B one way, 2 processes on 2 cores at load average 12: pinned to two CPUs, a
// 2 us spin slept before most replies (p50 16-18 us, a cross-CPU wake-up), 5-20 us caught them
// (0.6-1.2 us); left to the kernel, which put both on one CPU most of the time, every microsecond
// of spin delayed the peer (p50 7.5 us after a 2 us spin, 11 us after 5, 26 us after 20).
std::chrono::nanoseconds PairProgress::spin_window() {
  if (!enter()) return std::chrono::nanoseconds(0);
  const bool same_cpu = t_.peer_on_this_cpu(p_);
  leave();
  return same_cpu ? std::chrono::nanoseconds(kSpinSameCpu) : std::chrono::nanoseconds(kSpinOtherCpu);
}

// This side's wait count in the pair segment: recv_waiting of the pair peer -> this rank, or
// send_waiting of the pair this rank -> peer (the peer reads it before it rings us).
shm::PaddedCounter* PairProgress::wait_count() const {
  return side_ == Side::Recv ? p_.env.in.recv_waiting : p_.env.out.send_waiting;
}

void PairProgress::begin_wait() {
  if (!enter()) return;
  wait_count()->value.fetch_add(1, std::memory_order_seq_cst);
  leave();
}

// While the count was up the peer rang our wait bell instead of our worker (peer_waiting): what it
// published until our decrement is seen by one more poll here, or, when the pair's lock is taken
// (a worker or another waiter may have read the pair before that publication), by our worker,
// woken now.
void PairProgress::end_wait() {
  if (!enter()) return;
  const bool recv = side_ == Side::Recv;
  wait_count()->value.fetch_sub(1, std::memory_order_seq_cst);
  bool lock_taken = false;
  t_.progress_on_caller(p_, recv, &lock_taken);
  if (lock_taken) recv ? t_.wake_recv_worker() : t_.wake_send_worker();
  leave();
}

// The ticket first, then a last poll and the status check: a publication after the ticket rings
// the bell (we are counted as waiting), one before it is seen by the poll, or by the worker or
// waiter that holds the lock and whose completion rings the bell (bell_sleepers counts us before
// the check).
// Before it sleeps, the waiter also checks that the peer lives (at most every 100 ms; a lost peer
// fails the pair, which wakes us): the worker, which nobody woke for this request, may be asleep
// for up to a second.
bool PairProgress::sleep(RequestState& st, std::chrono::nanoseconds timeout) {
  if (!enter()) return false;
  t_.check_peer_quietly(p_);
  const uint32_t ticket = bell_.prepare();
  st.bell_sleepers.fetch_add(1, std::memory_order_seq_cst);
  t_.progress_on_caller(p_, side_ == Side::Recv);
  // Closing rings the bell after it set closed_: seen here, or the ring is after our ticket.
  if (st.status.load(std::memory_order_seq_cst) == RequestState::kPending && !closed_.load(std::memory_order_seq_cst))
    bell_.wait(ticket, timeout);
  st.bell_sleepers.fetch_sub(1, std::memory_order_acq_rel);
  leave();
  return true;
}

}  // namespace peerlink::detail
