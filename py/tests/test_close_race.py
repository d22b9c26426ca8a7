"""close() racing blocked calls, from Python: every blocking call releases the GIL, so another
thread may close() the communicator while a call is blocked in it. The rule: the blocked call fails
with peerlink.InvalidArgument ("closed") within the wait's ~20 ms poll, close() returns after it,
and nothing crashes (a transport freed under the blocked thread would be a SIGSEGV)."""
import threading
import time

import pytest

from plmp import run_ranks

PROMPT = 2.0  # seconds: the goal is ~20 ms; generous for a loaded 2-core CI machine


def _idle(comm, ctx):
    """Rank 1: waits until rank 0 leaves (its close ends this wait with a peerlink.Error)."""
    import peerlink

    try:
        comm.wait_ipc_buffer(0, 77)
    except peerlink.Error:
        pass


def _close_while_blocked(comm, ctx, which):
    import numpy as np

    import peerlink

    if which == "allreduce":
        x = np.ones(64, dtype=np.float32)
        comm.allreduce(x)  # both ranks: sets up the collectives, so rank 0's next one waits on flags
    if ctx.rank == 1:
        return _idle(comm, ctx)
    calls = {
        "barrier": comm.barrier,
        "wait_ipc_buffer": lambda: comm.wait_ipc_buffer(1, 5),
        "allreduce": lambda: comm.allreduce(np.ones(64, dtype=np.float32)),
    }
    outcome = []

    def blocked():
        try:
            calls[which]()
            outcome.append("returned")
        except peerlink.InvalidArgument as e:
            outcome.append(("InvalidArgument", str(e)))
        except BaseException as e:  # noqa: BLE001 - anything else is the failure we look for
            outcome.append(("other", repr(e)))

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.2)  # the call is blocked in its wait by now
    t0 = time.monotonic()
    comm.close()
    took = time.monotonic() - t0
    t.join(PROMPT)
    assert not t.is_alive(), f"{which} still blocked after close()"
    assert len(outcome) == 1 and outcome[0][0] == "InvalidArgument", outcome
    assert "closed" in outcome[0][1], outcome
    assert took < PROMPT, f"close() took {took:.2f} s"
    with pytest.raises(peerlink.InvalidArgument, match="closed"):
        comm.barrier()
    return took


@pytest.mark.parametrize("which", ["barrier", "wait_ipc_buffer", "allreduce"])
def test_close_from_another_thread_wakes_the_blocked_call(which):
    took = run_ranks(_close_while_blocked, args=(which,), comm_timeout=20.0)[0]
    assert took < PROMPT
