"""Transfer microbenchmark on one Hopper GPU: bytes per second per SM for (a) TMA bulk
copies issued by one thread per SM, (b) ld/st by all 1024 threads of an SM, for SM counts
1..132 and message sizes 2 KB..1 MB, and (c) the copy engine path (cudaMemcpyAsync via
torch ``copy_``) for 64 KB..1 GB.

    python benchmarks/transfer.py --out DIR

Everything here is device-to-device on one GPU: each copied byte is read from and written
to HBM, so this measures the rate at which an SM (or the copy path) drives memory traffic,
the per-SM drive rate that bounds a put over NVLink, not NVLink itself. Rates are bytes
copied per second (HBM sees twice that). Kernels: benchmarks/transfer_kernels.py. Each
point: one warm-up, then ``reps`` launches between their own CUDA events, median. Writes
``transfer.json`` and prints the tables and the figures proposed for pkc/target/targets.py
(per-SM rate at 8 SMs and 32 KB messages, where the link, not HBM, would be the limit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SMS = [1, 2, 4, 8, 16, 32, 66, 132]
SIZES = [2 << 10 << i for i in range(10)]             # 2 KB .. 1 MB
CE_SIZES = [64 << 10 << (2 * i) for i in range(8)]    # 64 KB .. 1 GB
BUF = 1 << 30
PER_CTA_MAX = 16 << 20
FIGURE_SMS, FIGURE_MSG = 8, 32 << 10


def _fmt(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"


def time_launches(fn, reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)          # ~1 ms: the host queues ahead of the GPU
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch

    from transfer_kernels import launch_copy, tma_lag, tma_piece, tma_ring

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    dev = torch.device("cuda", 0)
    src = torch.randint(0, 256, (BUF,), dtype=torch.uint8, device=dev)
    dst = torch.empty(BUF, dtype=torch.uint8, device=dev)
    res = {"device": torch.cuda.get_device_name(0), "note": "device-to-device on one GPU; "
           "bytes copied per second (HBM traffic is twice that)", "sm_counts": SMS,
           "sizes": SIZES, "kernel": {}, "copy_engine": [], "checks": {}}
    # correctness of both kernels (all SMs, two message sizes)
    for kind in ("tma", "tma_l1", "ldst"):
        for msg in (2 << 10, 32 << 10):
            n = 132
            bpc = (BUF // n) // msg * msg
            dst.zero_()
            launch_copy(kind, src, dst, n, bpc, msg)
            torch.cuda.synchronize()
            ok = bool(torch.equal(dst[:n * bpc], src[:n * bpc]))
            res["checks"][f"{kind}_{_fmt(msg)}"] = ok
            print(f"check {kind} msg {_fmt(msg)}: {'ok' if ok else 'MISMATCH'}", flush=True)
    for kind in ("tma", "tma_l1", "ldst"):
        table = {}
        for n in SMS:
            for msg in SIZES:
                bpc = min(PER_CTA_MAX, BUF // n) // msg * msg
                t = time_launches(lambda: launch_copy(kind, src, dst, n, bpc, msg), args.reps)
                rate = n * bpc / t
                rec = {"sms": n, "msg": msg, "bytes": n * bpc, "secs": t, "GBps": rate / 1e9,
                       "GBps_per_sm": rate / n / 1e9}
                if kind.startswith("tma"):
                    ring = tma_ring(tma_piece(msg))
                    rec.update(piece=tma_piece(msg), ring=ring,
                               lag=tma_lag(ring) if kind == "tma" else 1)
                table[f"{n}/{msg}"] = rec
            print(f"{kind} {n:3d} SMs: " + " ".join(
                f"{table[f'{n}/{m}']['GBps_per_sm']:6.1f}" for m in SIZES), flush=True)
        res["kernel"][kind] = table
    for size in CE_SIZES:
        a, b = src[:size], dst[:size]
        reps = max(1, min(50, (256 << 20) // size))

        def batch(a=a, b=b, reps=reps):
            for _ in range(reps):
                b.copy_(a)
        t = time_launches(batch, args.reps) / reps
        res["copy_engine"].append({"bytes": size, "secs": t, "GBps": size / t / 1e9,
                                   "batch": reps})
        print(f"copy_ {_fmt(size):>5s}: {size / t / 1e9:8.1f} GB/s", flush=True)
    # the same copies through cuMemcpyBatchAsync with the "prefer overlap with compute"
    # hint, which asks the driver for the copy engines (a hint: it may be ignored)
    try:
        from cuda.bindings import driver as cu
        attr = cu.CUmemcpyAttributes()
        attr.srcAccessOrder = cu.CUmemcpySrcAccessOrder.CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
        attr.flags = cu.CUmemcpyFlags.CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE
        res["copy_engine_hint"] = []
        for size in CE_SIZES:
            reps = max(1, min(50, (256 << 20) // size))

            def batch(size=size, reps=reps):
                st = cu.CUstream(torch.cuda.current_stream().cuda_stream)
                for _ in range(reps):
                    r = cu.cuMemcpyBatchAsync([cu.CUdeviceptr(dst.data_ptr())],
                                              [cu.CUdeviceptr(src.data_ptr())], [size], 1,
                                              [attr], [0], 1, st)
                    err = r[0] if isinstance(r, tuple) else r
                    if err != cu.CUresult.CUDA_SUCCESS:
                        raise RuntimeError(f"cuMemcpyBatchAsync: {err}")
            t = time_launches(batch, args.reps) / reps
            res["copy_engine_hint"].append({"bytes": size, "secs": t, "GBps": size / t / 1e9})
            print(f"memcpy batch (prefer-overlap hint) {_fmt(size):>5s}: {size / t / 1e9:8.1f} GB/s",
                  flush=True)
        torch.cuda.synchronize()
    except Exception as e:        # an optional measurement
        res["copy_engine_hint_error"] = f"{type(e).__name__}: {e}"[:300]
        print("memcpy batch hint failed:", res["copy_engine_hint_error"], flush=True)
    k = res["kernel"]
    fig = {m: k[m][f"{FIGURE_SMS}/{FIGURE_MSG}"]["GBps_per_sm"] * 1e9 for m in ("tma", "ldst")}
    res["figures"] = {"tma_bw_per_sm": fig["tma"], "ldst_bw_per_sm": fig["ldst"],
                      "rule": f"per-SM rate at {FIGURE_SMS} SMs, {_fmt(FIGURE_MSG)} messages"}
    res["secs"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "transfer.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print_tables(res)
    return 0


def print_tables(res: dict) -> None:
    for kind, what in (("tma", "TMA bulk copy, one thread per SM, half the ring's stores in flight"),
                       ("tma_l1", "TMA bulk copy, one thread per SM, one store in flight"),
                       ("ldst", "ld/st, 1024 threads per SM")):
        t = res["kernel"][kind]
        print(f"\n{what}: GB/s per SM (bytes copied; device to device, not NVLink)")
        print(f"{'SMs':>4s} " + " ".join(f"{_fmt(m):>6s}" for m in SIZES) + "   total@32K")
        for n in SMS:
            print(f"{n:4d} " + " ".join(f"{t[f'{n}/{m}']['GBps_per_sm']:6.1f}" for m in SIZES)
                  + f"   {t[f'{n}/{32 << 10}']['GBps']:7.0f}")
    print("\ncopy engine path (torch copy_, cudaMemcpyAsync D2D): GB/s")
    print("  " + "  ".join(f"{_fmt(r['bytes'])}={r['GBps']:.0f}" for r in res["copy_engine"]))
    if res.get("copy_engine_hint"):
        print("cuMemcpyBatchAsync, prefer-overlap-with-compute hint: GB/s")
        print("  " + "  ".join(f"{_fmt(r['bytes'])}={r['GBps']:.0f}"
                               for r in res["copy_engine_hint"]))
    f = res["figures"]
    print(f"\nfigures ({f['rule']}): tma_bw_per_sm={f['tma_bw_per_sm'] / 1e9:.1f} GB/s, "
          f"ldst_bw_per_sm={f['ldst_bw_per_sm'] / 1e9:.1f} GB/s; checks {res['checks']}")


if __name__ == "__main__":
    sys.exit(main())
