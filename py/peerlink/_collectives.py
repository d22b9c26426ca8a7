"""Communicator's collectives (allreduce and torch.distributed's others), a mixin of
peerlink.Communicator (_comm.py), which provides _c, world_size, _view and _stream_of."""
from __future__ import annotations

from . import _peerlink as _C
from ._tensors import HOST, BufferView, stream_handle


def _op_name(op) -> str:
    """"sum", "max", "min", "prod", "avg" (any case), or torch.distributed's ReduceOp.SUM / AVG / ...
    (an enum member: its name)."""
    name = getattr(op, "name", None)
    return (name if isinstance(name, str) else str(op)).lower()


class CollectivesMixin:
    # ---- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensor, op: str = "sum", stream=None) -> None:
        """In place: tensor = op over all ranks. On GPUs it is enqueued on the current torch /
        CuPy stream (or `stream`) and returns without waiting; on the host backend it is
        synchronous. Raises UnsupportedError when the library has no collectives."""
        if not _C.has_collectives:
            raise _C.UnsupportedError("allreduce: this peerlink library was built without collectives")
        view = self._view(tensor, "allreduce", stream, sync=False)
        if view.dtype is None:
            raise _C.InvalidArgument("allreduce: cannot tell the element type of the tensor "
                                     f"({view.kind}); pass a typed array")
        if view.readonly:
            raise _C.InvalidArgument("allreduce: the array is read-only")
        handle = 0  # the legacy default stream; ignored on the host backend
        if view.device != HOST:
            if stream is None and view.kind == "torch":
                import torch

                stream = torch.cuda.current_stream(view.owner.device)
            elif stream is None and view.kind == "cai":
                stream = view.owner.__cuda_array_interface__.get("stream")
            handle = stream_handle(stream)
            if handle == 1:  # __cuda_array_interface__ spells the legacy default stream 1
                handle = 0
        count = view.nbytes // view.itemsize
        _C.allreduce(self._c, view.address, count, view.dtype, _op_name(op), handle)

    all_reduce = allreduce  # torch.distributed's name

    # torch.distributed's collectives. Every rank calls with tensors of the same dtype and sizes
    # (all_to_all_single: matching splits). On GPUs they are enqueued on the tensors' stream (torch:
    # the current stream of the device; CuPy: the stream its __cuda_array_interface__ names; or
    # `stream`) and return at once; on the host backend (numpy) they are synchronous.
    def all_gather_into_tensor(self, output, input, stream=None) -> None:
        """output = the inputs of ranks 0..n-1 concatenated (output holds world_size x input).
        In place when input is output's slice of this rank."""
        out = self._coll_view(output, "all_gather_into_tensor", stream, writable=True)
        inp = self._coll_view(input, "all_gather_into_tensor", stream)
        self._same_dtype(out, inp, "all_gather_into_tensor")
        if out.nbytes != inp.nbytes * self.world_size:
            raise _C.InvalidArgument(f"all_gather_into_tensor: output holds {out.nbytes} bytes, want world_size "
                                     f"({self.world_size}) x input's {inp.nbytes}")
        _C.collective(self._c, "all_gather", inp.address, out.address, inp.nbytes // inp.itemsize, inp.dtype,
                      "sum", 0, self._stream_of(out, stream))

    def reduce_scatter_tensor(self, output, input, op: str = "sum", stream=None) -> None:
        """output = op over ranks of this rank's slice of input (input holds world_size x output)."""
        out = self._coll_view(output, "reduce_scatter_tensor", stream, writable=True)
        inp = self._coll_view(input, "reduce_scatter_tensor", stream)
        self._same_dtype(out, inp, "reduce_scatter_tensor")
        if inp.nbytes != out.nbytes * self.world_size:
            raise _C.InvalidArgument(f"reduce_scatter_tensor: input holds {inp.nbytes} bytes, want world_size "
                                     f"({self.world_size}) x output's {out.nbytes}")
        _C.collective(self._c, "reduce_scatter", inp.address, out.address, out.nbytes // out.itemsize, out.dtype,
                      _op_name(op), 0, self._stream_of(out, stream))

    def broadcast(self, tensor, src: int, stream=None) -> None:
        """In place: tensor = rank src's tensor on every rank."""
        v = self._coll_view(tensor, "broadcast", stream, writable=True)
        _C.collective(self._c, "broadcast", v.address, v.address, v.nbytes // v.itemsize, v.dtype, "sum",
                      int(src), self._stream_of(v, stream))

    def reduce(self, tensor, dst: int, op: str = "sum", stream=None) -> None:
        """In place: rank dst's tensor = op over all ranks' tensors; the others' are left unchanged."""
        v = self._coll_view(tensor, "reduce", stream, writable=True)
        _C.collective(self._c, "reduce", v.address, v.address, v.nbytes // v.itemsize, v.dtype, _op_name(op),
                      int(dst), self._stream_of(v, stream))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          stream=None) -> None:
        """Rank r's input rows for rank q land in rank q's output rows for r, in rank order.
        Split sizes count rows of dimension 0 (torch semantics); None = equal splits."""
        what = "all_to_all_single"
        out = self._coll_view(output, what, stream, writable=True)
        inp = self._coll_view(input, what, stream)
        self._same_dtype(out, inp, what)
        n = self.world_size
        if output_split_sizes is None and input_split_sizes is None:
            if inp.nbytes != out.nbytes or (inp.nbytes // inp.itemsize) % n:
                raise _C.InvalidArgument(f"{what}: input ({inp.nbytes} bytes) and output ({out.nbytes} bytes) must "
                                         f"match and split evenly over {n} ranks")
            _C.collective(self._c, "all_to_all", inp.address, out.address, inp.nbytes // inp.itemsize // n,
                          inp.dtype, "sum", 0, self._stream_of(out, stream))
            return

        def splits(view, obj, sizes, name):
            elems = view.nbytes // view.itemsize
            shape = tuple(getattr(obj, "shape", (elems,))) or (1,)
            row = elems // shape[0] if shape[0] else 0
            if sizes is None:
                if shape[0] % n:
                    raise _C.InvalidArgument(f"{what}: {name} has {shape[0]} rows, not divisible by {n} ranks")
                sizes = [shape[0] // n] * n
            sizes = [int(x) for x in sizes]
            if len(sizes) != n or min(sizes) < 0 or sum(sizes) > shape[0]:
                raise _C.InvalidArgument(f"{what}: {name}_split_sizes {sizes} must be {n} non-negative row counts "
                                         f"summing to at most {shape[0]}")
            counts = [s * row for s in sizes]
            displs = [sum(counts[:i]) for i in range(n)]
            return counts, displs

        sc, sd = splits(inp, input, input_split_sizes, "input")
        rc, rd = splits(out, output, output_split_sizes, "output")
        _C.all_to_all_v(self._c, inp.address, sc, sd, out.address, rc, rd, inp.dtype, self._stream_of(out, stream))

    # ---- the fused tensor-parallel epilogue (peerlink/fused.h) ----------------------------------
    def allreduce_add_rms_norm(self, input, residual, weight, eps: float, weight_bias: float = 0.0,
                               norm_out=None, residual_out=None, stream=None):
        """A decoder layer's epilogue in one pass: s = the sum over ranks of input,
        residual_out = s + residual, norm_out = residual_out / rms(residual_out) * (weight_bias + weight)
        (rms over each row, eps inside the root; f32 math, one rounding per output; the norm reads
        the rounded residual_out). input and residual hold tokens x hidden elements, weight hidden
        of them, all of one dtype (bfloat16, float16 or float32). By default in place (vLLM's
        fused_add_rms_norm): norm_out is input, residual_out is residual. Every rank gets the same
        bits. Stream-ordered on GPUs, synchronous on the host backend. Returns (norm_out, residual_out)."""
        norm_out = input if norm_out is None else norm_out
        residual_out = residual if residual_out is None else residual_out
        self._fused("allreduce_add_rms_norm", input, residual, weight, eps, weight_bias, norm_out, residual_out,
                    None, None, stream)
        return norm_out, residual_out

    def allreduce_add_rms_norm_fp8(self, input, residual, weight, scale, quant_out, eps: float,
                                   weight_bias: float = 0.0, norm_out=None, residual_out=None, stream=None):
        """allreduce_add_rms_norm, and quant_out = e4m3(norm / scale) (OCP FP8 E4M3, saturated at
        +-448): quant_out holds tokens x hidden bytes (float8_e4m3fn or uint8), scale one float32 on
        the communicator's device (a static per-tensor scale, read when the call runs). norm_out
        None: the norm is not written (vLLM's static FP8 quantization); residual_out None: in place
        in residual. Returns (quant_out, residual_out)."""
        residual_out = residual if residual_out is None else residual_out
        self._fused("allreduce_add_rms_norm_fp8", input, residual, weight, eps, weight_bias, norm_out, residual_out,
                    quant_out, scale, stream)
        return quant_out, residual_out

    def _fused(self, what, input, residual, weight, eps, weight_bias, norm_out, residual_out, quant_out, scale,
               stream) -> None:
        inp = self._coll_view(input, what, stream)
        res = self._coll_view(residual, what, stream)
        w = self._coll_view(weight, what, stream)
        rout = self._coll_view(residual_out, what, stream, writable=True)
        norm = None if norm_out is None else self._coll_view(norm_out, what, stream, writable=True)
        for v in (res, w, rout, norm):
            if v is not None:
                self._same_dtype(v, inp, what)
        hidden = w.nbytes // w.itemsize
        count = inp.nbytes // inp.itemsize
        if hidden == 0 or count % hidden:
            raise _C.InvalidArgument(f"{what}: input holds {count} elements, not a whole number of rows of weight's "
                                     f"{hidden}")
        for name, v in (("residual", res), ("residual_out", rout), ("norm_out", norm)):
            if v is not None and v.nbytes != inp.nbytes:
                raise _C.InvalidArgument(f"{what}: {name} holds {v.nbytes} bytes, input {inp.nbytes}")
        q_addr = s_addr = 0
        if quant_out is not None:
            q = self._view(quant_out, what, stream, sync=False)
            if q.readonly or q.itemsize != 1 or q.nbytes != count:
                raise _C.InvalidArgument(f"{what}: quant_out must be {count} writable one-byte elements "
                                         f"(float8_e4m3fn or uint8); got {q.nbytes} bytes of {q.itemsize}")
            s = self._coll_view(scale, what, stream)
            if s.dtype != "float32" or s.nbytes != 4:
                raise _C.InvalidArgument(f"{what}: scale must be one float32, got {s.nbytes} bytes of {s.dtype}")
            q_addr, s_addr = q.address, s.address
        _C.allreduce_add_rmsnorm(self._c, inp.address, res.address, w.address, 0 if norm is None else norm.address,
                                 rout.address, q_addr, s_addr, count // hidden, hidden, inp.dtype, float(eps),
                                 float(weight_bias), self._stream_of(inp, stream))

    # ---- registered windows (peerlink/windows.h) -------------------------------------------------
    def register_window(self, tensor) -> int:
        """Collective (every rank, same order): registers the tensor's memory as a window and
        returns its id. all_gather_into_tensor, all_to_all_single (equal splits) and broadcast whose
        output lies in a window, at the same offset on every rank, may then write the peers'
        outputs directly (zero-copy). The tensor must stay alive until deregister_window."""
        if not _C.has_collectives:
            raise _C.UnsupportedError("register_window: this peerlink library was built without collectives")
        view = self._view(tensor, "register_window", None, sync=False)
        return int(_C.register_window(self._c, view.address, view.nbytes))

    def deregister_window(self, window_id: int) -> None:
        """Releases a window of register_window (every rank, same order); waits for this rank's
        collectives already enqueued."""
        _C.deregister_window(self._c, int(window_id))

    def _coll_view(self, tensor, what: str, stream, writable: bool = False) -> BufferView:
        if not _C.has_collectives:
            raise _C.UnsupportedError(f"{what}: this peerlink library was built without collectives")
        view = self._view(tensor, what, stream, sync=False)
        if view.dtype is None:
            raise _C.InvalidArgument(f"{what}: cannot tell the element type of the tensor ({view.kind}); "
                                     "pass a typed array")
        if writable and view.readonly:
            raise _C.InvalidArgument(f"{what}: the output array is read-only")
        return view

    @staticmethod
    def _same_dtype(a: BufferView, b: BufferView, what: str) -> None:
        if a.dtype != b.dtype:
            raise _C.InvalidArgument(f"{what}: output is {a.dtype} but input is {b.dtype}")
