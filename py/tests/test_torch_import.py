"""peerlink without torch: the package imports and works, and peerlink.torch raises an ImportError
that says torch is needed. Runs everywhere (CI has no torch): a subprocess hides torch when it is
installed here."""
import subprocess
import sys

HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_peerlink_works_without_torch():
    p = _run(HIDE_TORCH + "import peerlink\n"
             "with peerlink.Communicator('t-notorch-' + __import__('uuid').uuid4().hex[:8], 0, 1, -1) as c:\n"
             "    import numpy as np\n"
             "    a = np.arange(4, dtype=np.float32)\n"
             "    c.allreduce(a)\n"
             "    print('ok', a.tolist())\n")
    assert p.returncode == 0, p.stderr
    assert "ok [0.0, 1.0, 2.0, 3.0]" in p.stdout


def test_peerlink_torch_says_torch_is_needed():
    p = _run(HIDE_TORCH + "import peerlink\n"
             "try:\n"
             "    import peerlink.torch\n"
             "except ImportError as e:\n"
             "    print('ImportError:', e)\n"
             "else:\n"
             "    print('imported')\n")
    assert p.returncode == 0, p.stderr
    assert "ImportError: peerlink.torch needs PyTorch" in p.stdout, p.stdout
    assert "pip install" in p.stdout


def test_peerlink_torch_refuses_another_torch_version():
    """The build record names the torch it was built against; another one is a clean ImportError
    (checked before the extension is loaded, which could crash)."""
    code = ("import sys, types\n"
            "fake = types.ModuleType('torch'); fake.__version__ = '0.0.0-not-this'\n"
            "fake.distributed = types.ModuleType('torch.distributed'); fake.distributed.is_available = lambda: True\n"
            "sys.modules['torch'] = fake; sys.modules['torch.distributed'] = fake.distributed\n"
            "import peerlink\n"
            "try:\n"
            "    import peerlink.torch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    p = _run(code)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "ImportError: peerlink.torch:" in out, out
    assert ("this process runs torch 0.0.0-not-this" in out) or ("built without its torch extension" in out), out
