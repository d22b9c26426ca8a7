import faulthandler, os, sys
faulthandler.enable()
kind = sys.argv[1]
if kind == "torch":
    import torch
    torch.cuda.set_device(0)
    print("torch", torch.__version__, flush=True)
import peerlink
print("peerlink imported", peerlink.__file__, flush=True)
c = peerlink.Communicator("diag-" + kind, 0, 1, 0)
print("comm ok", flush=True)
b = c.empty(1024, "uint8")
print("empty ok", type(b), flush=True)
c.close()
print("closed", flush=True)
