import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # plmp, for spawned ranks too

from plmp import KINDS, kind_available  # noqa: E402


@pytest.fixture(params=KINDS)
def kind(request):
    """Array kind of a test: numpy on the host backend; torch / CuPy on GPUs (skipped without)."""
    reason = kind_available(request.param)
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return request.param
