"""The virtual world: W ranks of one kernel in one process on one GPU.

Every symmetric buffer and signal array exists W times (torch allocations); a device
array of the W copies' addresses is the symmetric parameter every rank gets, so peers'
puts and signals use real pointers, and traffic goes through HBM instead of NVLink.

One launch:
1. on torch's current stream: allocate; zero the signal pads, workspaces, error records
   and ``zero`` allocs of every rank; poison (NaN) outputs and other allocs; then record
   an event: all ranks' zeroing is complete before any rank's kernel starts;
2. per rank: its lane's stream (own green context, :mod:`pkc.runtime.green`) waits for
   that event, the kernel launches there with its CTA counts fitted to the lane's SMs,
   and torch's stream waits for the lane;
3. after the kernels, each rank's error record is read: a timed-out wait raises
   :class:`~pkc.runtime.errors.KernelTimeoutError` naming kernel, rank and signal.

While torch's stream is capturing a CUDA graph, step 3 is deferred to the kernel's next
call outside a capture (a capture cannot synchronize), and the device pointer arrays are
written by fills on the device (a host-to-device copy cannot be captured).
"""

from __future__ import annotations

import math

import torch

from pkc.codegen.abi import ERROR_WORDS, BufferOrigin
from pkc.codegen.emit import CompiledKernel
from pkc.interp.values import torch_dtype
from pkc.runtime import launch as L
from pkc.runtime.driver import call, new_event, stream_handle
from pkc.runtime.errors import CudaDriverError, decode_error
from pkc.runtime.green import lanes

DEFAULT_TIMEOUT_S = 5.0


def dtype_of(name: str) -> torch.dtype:
    from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, IntegerType

    table = {"bf16": BFloat16Type(), "f16": Float16Type(), "f32": Float32Type(),
             "f64": Float64Type(), "i1": IntegerType(1), "i8": IntegerType(8),
             "i32": IntegerType(32), "i64": IntegerType(64)}
    fp8 = {"f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2}
    return fp8[name] if name in fp8 else torch_dtype(table[name])


def poison_(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return t.fill_(math.nan)
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).min)


def _pointer_array(ts: list[torch.Tensor], dev) -> torch.Tensor:
    """A device int64 array of the tensors' addresses, written by fills on the device (no
    host-to-device copy, which a CUDA graph capture forbids from pageable memory)."""
    arr = torch.empty(len(ts), dtype=torch.int64, device=dev)
    for i, t in enumerate(ts):
        arr[i].fill_(t.data_ptr())
    return arr


class VirtualWorld:
    """Runs compiled kernels for ``world`` ranks on one GPU."""

    def __init__(self, world: int, device: int | torch.device | None = None, green: bool = True):
        if not torch.cuda.is_available():
            from pkc.runtime.errors import RuntimeUnavailable

            raise RuntimeUnavailable("no CUDA device")
        self.world = world
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None
                                   else torch.device(device).index or 0)
        torch.cuda.init()
        self.ordinal = self.device.index
        self.capability = torch.cuda.get_device_capability(self.device)
        self.green = green
        self.lanes, self.mode = lanes(world, self.ordinal, green)
        self._errors: dict[str, torch.Tensor] = {}      # kernel PTX -> [W, ERROR_WORDS]
        self._unchecked: dict[str, float] = {}          # kernels launched in a capture

    def run(self, ck: CompiledKernel, inputs: list[list[torch.Tensor]],
            timeout_s: float = DEFAULT_TIMEOUT_S) -> list[list[torch.Tensor]]:
        """``inputs[r]``: rank r's kernel inputs. Returns ``outputs[r]``.

        Capturable into a CUDA graph: nothing is copied from the host (pointer arrays are
        filled on the device) and, while torch's stream is capturing, the call neither
        synchronizes nor reads the error records; a timed-out wait of a captured launch
        is raised by this kernel's next call outside a capture."""
        meta = ck.meta
        W = self.world
        if meta.world != W:
            raise ValueError(f"kernel @{meta.name} is compiled for {meta.world} ranks, the world has {W}")
        kernel = L.load(ck, self.ordinal, self.capability)
        dev = self.device
        capturing = torch.cuda.is_current_stream_capturing()
        errors = self._errors_of(ck, capturing, timeout_s)
        keep: list[torch.Tensor] = []
        bufs: list[list[int]] = [[] for _ in range(W)]
        outputs: dict[int, list[torch.Tensor]] = {}
        with torch.cuda.device(dev):
            for b in meta.buffers:
                dt = dtype_of(b.dtype)
                if b.origin is BufferOrigin.INPUT:
                    ts = [inputs[r][b.index].to(dev, dt).contiguous() for r in range(W)]
                else:
                    ts = [torch.empty(b.shape, dtype=dt, device=dev) for _ in range(W)]
                    for t in ts:
                        t.zero_() if b.zero else poison_(t)
                    if b.origin is BufferOrigin.OUTPUT:
                        outputs[b.index] = ts
                keep += ts
                if b.symmetric:
                    arr = _pointer_array(ts, dev)
                    keep.append(arr)
                    for r in range(W):
                        bufs[r].append(arr.data_ptr())
                else:
                    for r in range(W):
                        bufs[r].append(ts[r].data_ptr())
            sig_params = []
            for s in meta.signals:
                pads = [torch.zeros(s.count, dtype=torch.int32, device=dev) for _ in range(W)]
                arr = _pointer_array(pads, dev)
                keep += pads + [arr]
                sig_params.append(arr.data_ptr())
            errors.zero_()
            workspace = torch.zeros(W, meta.workspace_words, dtype=torch.int32, device=dev)
            self._launch_all(ck, kernel, bufs, sig_params, errors, workspace, timeout_s)
            if capturing:
                # the graph's memory pool keeps every tensor above alive for its replays
                self._unchecked[ck.ptx] = timeout_s
            else:
                torch.cuda.current_stream(dev).synchronize()
        if not capturing:
            self._raise_errors(ck, errors, timeout_s)
        return [[outputs[i][r] for i in sorted(outputs)] for r in range(W)]

    def _errors_of(self, ck: CompiledKernel, capturing: bool, timeout_s: float) -> torch.Tensor:
        """The kernel's error records (one per rank, kept per kernel). Outside a capture,
        first raise what launches of a captured graph recorded since the last check."""
        errs = self._errors.get(ck.ptx)
        if errs is None:
            errs = self._errors[ck.ptx] = torch.zeros(self.world, ERROR_WORDS, dtype=torch.int32,
                                                      device=self.device)
        if not capturing and ck.ptx in self._unchecked:
            torch.cuda.current_stream(self.device).synchronize()
            self._raise_errors(ck, errs, self._unchecked.pop(ck.ptx))
        return errs

    def _launch_all(self, ck, kernel, bufs, sig_params, errors, workspace, timeout_s) -> None:
        try:
            self._launch(ck, kernel, bufs, sig_params, errors, workspace, timeout_s)
        except CudaDriverError as e:
            if self.mode != "green contexts":
                raise
            # A driver that cannot launch this image on green-context streams: plain streams.
            self.lanes, self.mode = lanes(self.world, self.ordinal, green=False)
            self.mode += f" (launch on green contexts failed: {e})"
            self._launch(ck, kernel, bufs, sig_params, errors, workspace, timeout_s)

    def _launch(self, ck, kernel, bufs, sig_params, errors, workspace, timeout_s) -> None:
        meta = ck.meta
        torch_stream = stream_handle(torch.cuda.current_stream(self.device))
        start = new_event()
        call("cuEventRecord", start, torch_stream)
        for lane in self.lanes:
            r = lane.rank
            ctas = L.fit_ctas(meta, lane.sm_count)
            ps = L.params(meta, bufs[r], sig_params, r, self.world, errors[r].data_ptr(),
                          workspace[r].data_ptr(), timeout_s, ctas)
            call("cuStreamWaitEvent", lane.stream, start, 0)
            kernel.launch(sum(ctas), meta.threads, lane.stream, ps)
            call("cuEventRecord", lane.done, lane.stream)
            call("cuStreamWaitEvent", torch_stream, lane.done, 0)

    def _raise_errors(self, ck, errors: torch.Tensor, timeout_s: float) -> None:
        records = errors.cpu().tolist()
        found = [e for r, rec in enumerate(records)
                 if (e := decode_error(ck.meta, r, [x & 0xFFFFFFFF for x in rec], timeout_s))]
        if found:
            first = found[0]
            if len(found) > 1:
                others = "; ".join(f"rank {e.rank}" for e in found[1:])
                first.args = (f"{first.args[0]}\n(also timed out: {others})",)
            raise first
