"""Compile time of a layer under ``torch.compile(backend=pkc.backend(...))`` (issue 18):
cold (empty caches) and a second process (the caches the first one left), each a fresh
Python process, against plain Inductor on the same layer.

What is timed (``first_call_s``): from the start of the compiled module's first call to
its result (synchronized on the GPU), i.e. dynamo's tracing, pkc's capture, passes (or
its disk cache), Inductor (or its caches) and one run of the layer. Not included, and
reported beside it: ``import torch`` (``import_torch_s``), ``import pkc``
(``import_pkc_s``; xDSL and pkc's dialects), building the layer and the process group.
The ``torch.compile(...)`` call is included (``torch_compile_call_s`` says how much of
it): it imports torch._dynamo on first use and, with dynamo's precompile cache on, loads
the precompiled frame there.

    python benchmarks/compile_time.py                          # CPU: 8B MLP decode T = 16
    python benchmarks/compile_time.py --device cuda            # GPU: 8B MLP prefill T = 512
    python benchmarks/compile_time.py --case "llama3-8b decoder decode T=1 bf16" --repeat 3
    python benchmarks/compile_time.py --list

Backends (``--backends``): ``pkc`` (``pkc.backend(pipeline="default")``), ``inductor``
(plain ``torch.compile``), and each ``+precompile``: with dynamo's precompile cache on
(``TORCH_CACHING_PRECOMPILE=1``; pkc.runtime.precompile), where a second process loads
dynamo's bytecode, guards and the compiled graph (at ``torch.compile``, which is timed)
instead of tracing and compiling.

``pkc+aot``: ``pkc.aot_compile`` (pkc/aot): the first process compiles through
``torch.compile`` with pkc's backend and a detached process packages pkc's program with
AOTInductor (the cold row waits for it after its first call and reports how long:
``aot.package_wait_s``, ``package_build_s``); a second process computes the key and loads
that package, importing neither torch._dynamo nor torch._inductor (``heavy_modules`` lists
what a process imported of those and xDSL). ``pkc+aot-now``: the package is built inside
the first process's ``aot_compile`` call (AOTInductor only; its time counts there). Every
row also has ``steady_ms``: the median wall time of a call after the first (host included).

Every case gets a fresh cache folder (``--cache-dir``: keep it) holding pkc's and
Inductor's caches (``PKC_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, Triton's under it);
the cold process starts with it empty, the second and later ones reuse it (pkc's key is
pinned for the run, ``PKC_COMPILE_CACHE_VERSION``: edits others make to pkc's sources
meanwhile must not turn a second process into a cold one; the pinned key is kept in the
cache folder). ``--repeat`` runs the second process several times; ``--second-only`` (with
``--cache-dir``) runs only second processes on the caches an earlier run left, e.g. again in
another environment (with and without a bytecode cache). Output: per process, a line and pkc's own
first-call line (``pkc.backend``'s remark: dynamo, capture, passes, Inductor, cache hits),
then a table, then one JSON line (``--json``: also to a file) with each process's
breakdown (dynamo's timers, Inductor's / AOTAutograd's cache counters, CPU seconds: on a
loaded machine wall time is inflated, CPU time much less).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# small by default: the layer on the GPU; on the CPU a decode size (a T = 512
# bf16 matmul takes seconds on a CPU, which would only add the layer's run time)
DEFAULT_CASES = {"cuda": ["llama3-8b mlp prefill T=512 bf16"],
                 "cpu": ["llama3-8b mlp decode T=16 bf16"]}
# "+precompile": dynamo's precompile cache on (TORCH_CACHING_PRECOMPILE=1): a second
# process loads dynamo's bytecode, guards and the compiled graph instead of tracing; pkc
# writes that cache after the first call, plain Inductor needs save_cache_artifacts()
# "pkc+aot": pkc.aot_compile (pkc/aot): the first process compiles through torch.compile and
# a background process packages pkc's program with AOTInductor; a second process loads the
# package without importing torch._dynamo / torch._inductor ("pkc+aot-now": the package is
# built inside the first process's aot_compile call, so its time counts there)
BACKENDS = ("pkc", "pkc+precompile", "inductor", "inductor+precompile", "pkc+aot", "pkc+aot-now")
_HEAVY = ("torch._dynamo", "torch._inductor", "xdsl")   # what the aot fast path must not import
# pkc's cache key includes a hash of pkc's sources; in a tree that others edit meanwhile
# the cold and second processes would hash different sources (a miss that no user sees),
# so one run of this script pins it (its caches are fresh anyway)
_VERSION = f"compile_time-{os.getpid()}-{time.time_ns()}"


# ---------------------------------------------------------------------- one process


def _counters() -> dict:
    from torch._dynamo.utils import counters

    keep = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass",
            "autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass",
            "dynamo_cache_hit", "dynamo_cache_miss", "dynamo_cache_error")
    out = {}
    for group in ("inductor", "aot_autograd", "dynamo_cache"):
        for k, v in counters[group].items():
            if k in keep:
                out[k] = out.get(k, 0) + v
    return out


def _dynamo_times() -> dict:
    from torch._dynamo.utils import compile_times

    names, values = compile_times(repr="csv", aggregate=True)
    return {n: round(float(v), 4) for n, v in zip(names, values)}


def _globalize(m) -> None:
    """Dynamo's precompile cache refuses (an error at compile time) module classes defined
    in a function, as models.build defines the layers: name them as module-level classes
    of their module (the same in every process)."""
    for mod in m.modules():
        cls = type(mod)
        if "<locals>" in cls.__qualname__:
            cls.__qualname__ = cls.__name__
            setattr(sys.modules[cls.__module__], cls.__name__, cls)


def child(case_words: str, device: str, backend: str, profile: str | None) -> dict:
    """This process's first call of the compiled layer (see the module docstring)."""
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter() - t0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import models

    t1 = time.perf_counter()
    be = None
    aot = backend.startswith("pkc+aot")
    if aot:
        import pkc
    elif backend.startswith("pkc"):
        import pkc

        be = pkc.backend(pipeline="default")
    t_pkc = time.perf_counter() - t1
    models._init_group(device)
    case = next(c for c in models.all_cases() if all(w in c.label for w in case_words.split()))
    m, x = models.build(case, device=device)
    if backend.endswith("+precompile"):
        _globalize(m)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t2, c2, k2 = time.perf_counter(), time.process_time(), sum(os.times()[2:4])
    if aot:     # the key, then the package's load or the compile (which runs the layer once)
        cm = pkc.aot_compile(m, (x,), pipeline="default",
                             build="now" if backend.endswith("-now") else "background")
    else:
        cm = torch.compile(m, backend=be if be is not None else "inductor", fullgraph=True, dynamic=False)
    t_wrap = time.perf_counter() - t2     # imports torch._dynamo; loads dynamo's precompile cache
    with torch.no_grad():
        y = cm(x)
    if device != "cpu":
        torch.cuda.synchronize()
    first = time.perf_counter() - t2
    first_cpu, first_children = time.process_time() - c2, sum(os.times()[2:4]) - k2
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    heavy = sorted({h for h in _HEAVY for k in sys.modules if k == h or k.startswith(h + ".")})
    steady = _steady_ms(cm, x, device)
    if be is None and backend.endswith("+precompile"):
        torch.compiler.save_cache_artifacts()   # writes dynamo's cache (pkc does it itself)
    with torch.no_grad():
        ref = m(x).float()
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    row = {"case": case.label, "device": device, "backend": backend, "first_call_s": first,
           "import_torch_s": t_torch, "import_pkc_s": t_pkc, "max_err_rel": err,
           "torch_compile_call_s": t_wrap, "first_call_cpu_s": first_cpu, "first_call_children_cpu_s": first_children,
           "counters": _counters() if "torch._dynamo" in heavy else {},
           "dynamo": _dynamo_times() if "torch._dynamo" in heavy else {},
           "heavy_modules": heavy, "steady_ms": steady}
    if aot:
        row["aot"] = {"loaded": cm.loaded, "remarks": cm.remarks}
        row["remark"] = " | ".join(cm.remarks)
        if not cm.loaded:      # the background build: how long until a later process can load it
            t = time.perf_counter()
            ready = cm.wait_for_package(timeout=float(os.environ.get("PKC_CT_BUILD_WAIT", "400")))
            row["aot"]["package_ready"] = ready
            row["aot"]["package_wait_s"] = time.perf_counter() - t
            try:
                meta = json.loads((cm.folder / "meta.json").read_text())
                row["aot"]["package_build_s"] = meta["build_s"]
                row["aot"]["linked"] = meta.get("linked", "")      # "" as torch links it, else pkc's fix
            except (OSError, ValueError, KeyError):
                pass
            for name in ("failed.json", "build.log"):               # why no package, if none
                with contextlib.suppress(OSError):
                    row["aot"][name] = (cm.folder / name).read_text()[-1500:]
    if be is not None and be.compile_times:
        row["pkc"] = {k: (round(v, 4) if isinstance(v, float) else v)
                      for k, v in be.compile_times[-1].items()}
        remark = [r for r in be.programs[-1].remarks() if "first call" in r]
        row["remark"] = remark[-1] if remark else ""
    return row


def _steady_ms(fn, x, device: str, n: int = 20) -> float:
    """Per-call wall time after the first call (host included), ms, median of ``n``."""
    import torch

    times = []
    with torch.no_grad():
        for _ in range(n + 3):
            t = time.perf_counter()
            fn(x)
            if device != "cpu":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    times = sorted(times[3:])
    return round(1e3 * times[len(times) // 2], 4)


# ---------------------------------------------------------------------- the driver


def _pinned_version(cache: Path) -> str:
    """pkc's pinned key for ``cache``: the one its first run wrote there (a ``--second-only``
    run must see the packages and IR of that run as current), else this run's."""
    path = cache / "pkc_version.txt"
    try:
        return path.read_text().strip() or _VERSION
    except OSError:
        path.write_text(_VERSION)
        return _VERSION


def run_process(case: str, device: str, backend: str, cache: Path, *, profile: str | None = None,
                timeout: float = 900) -> dict:
    """One fresh process's first call with ``cache`` as its cache folder."""
    env = {**os.environ, "PKC_CACHE_DIR": str(cache / "pkc"),      # pkc's IR cache, its aot packages
           "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
           "TRITON_CACHE_DIR": str(cache / "inductor" / "triton"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("PKC_COMPILE_CACHE_DIR", None)
    env.setdefault("PKC_COMPILE_CACHE_VERSION", _pinned_version(cache))
    env["TORCH_CACHING_PRECOMPILE"] = "1" if backend.endswith("+precompile") else "0"
    env.setdefault("PYTHONFAULTHANDLER", "1")    # a crashing process says where (its error row)
    cmd = [sys.executable, __file__, "--child", case, "--device", device, "--backend", backend]
    if profile:
        cmd += ["--profile", profile]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        return {"case": case, "backend": backend, "returncode": res.returncode,
                "error": (res.stderr[-2000:] or res.stdout[-2000:]).strip() or f"exit {res.returncode}",
                "process_s": wall}
    row = json.loads(lines[-1])
    row["process_s"] = wall
    return row


def measure(case: str, device: str, backends: list[str], repeat: int, cache_dir: str | None,
            profile_dir: str | None = None, keep: bool = False, second_only: bool = False) -> list[dict]:
    """``keep``: reuse ``cache_dir``'s folders as an earlier case left them (a "cold" row is
    then a new layer on a machine that compiled another one before); ``second_only``: keep
    them and run only the second processes (e.g. again in another environment)."""
    rows = []
    for backend in backends:
        cache = Path(cache_dir) / backend if cache_dir else Path(tempfile.mkdtemp(prefix="pkc-ct-"))
        if cache.exists() and cache_dir and not (keep or second_only):
            shutil.rmtree(cache)
        cache.mkdir(parents=True, exist_ok=True)
        try:
            for k in range(1 if second_only else 0, 1 + repeat):
                prof = None
                if profile_dir:
                    prof = str(Path(profile_dir) / f"{backend}-{k}.prof")
                row = run_process(case, device, backend, cache, profile=prof)
                row["run"] = "cold" if k == 0 else f"second{k if repeat > 1 else ''}"
                rows.append(row)
                print(_line(row), file=sys.stderr, flush=True)
        finally:
            if not cache_dir:
                shutil.rmtree(cache, ignore_errors=True)
    return rows


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['case']:<38} {r['backend']:<9} {r.get('run', ''):<8} ERROR {r['error'].splitlines()[-1:]}"
    pkc = r.get("pkc", {})
    hits = r.get("counters", {})
    parts = [f"{r['case']:<38} {r['backend']:<9} {r['run']:<8}",
             f"first call {r['first_call_s']:7.2f} s (cpu {r['first_call_cpu_s']:5.2f} + "
             f"{r['first_call_children_cpu_s']:5.2f} s)", f"import pkc {r['import_pkc_s']:5.2f} s"]
    if pkc:
        parts.append(f"pkc {pkc.get('pkc_s', 0):5.2f} s (cache {'hit' if pkc.get('cache_hit') else 'miss'})"
                     f" inductor {pkc.get('inductor_s', 0):5.2f} s")
    if "aot" in r:
        a = r["aot"]
        parts.append(f"aot {'loaded' if a['loaded'] else 'compiled'}" + (
            f", package ready after {a['package_wait_s']:.1f} s (build {a.get('package_build_s', float('nan')):.1f} s"
            f"{', ' + a['linked'] if a.get('linked') else ''})"
            if "package_wait_s" in a else ""))
    parts.append(f"imports {','.join(r.get('heavy_modules', [])) or 'no dynamo/inductor/xdsl'}"
                 f" | steady {r.get('steady_ms', float('nan')):.3f} ms")
    parts.append("fx %s/%s aot %s/%s dynamo %s/%s" % (
        hits.get("fxgraph_cache_hit", 0), hits.get("fxgraph_cache_miss", 0), hits.get("autograd_cache_hit", 0),
        hits.get("autograd_cache_miss", 0), hits.get("dynamo_cache_hit", 0), hits.get("dynamo_cache_miss", 0)))
    line = " | ".join(parts)
    return line + (f"\n    {r['remark']}" if r.get("remark") else "")


def table(rows: list[dict]) -> str:
    head = ("| case | backend | run | first call (s) | its CPU: process + children (s) | import pkc (s) "
            "| pkc: capture (s) | pkc: passes (s) | pkc IR cache | Inductor part (s) "
            "| FX-graph cache hit/miss | AOTAutograd cache hit/miss | dynamo cache hit/miss "
            "| imports dynamo / Inductor | steady call (ms) |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['backend']} | {r.get('run', '')} | error |" + " |" * 11)
            continue
        p, c = r.get("pkc", {}), r.get("counters", {})
        out.append(f"| {r['case']} | {r['backend']} | {r['run']} | {r['first_call_s']:.2f} | "
                   f"{r['first_call_cpu_s']:.2f} + {r['first_call_children_cpu_s']:.2f} | "
                   f"{r['import_pkc_s']:.2f} | {p.get('capture_s', float('nan')):.2f} | "
                   f"{p.get('pkc_s', float('nan')):.2f} | "
                   f"{'hit' if p.get('cache_hit') else ('miss' if p else '-')} | "
                   f"{p.get('inductor_s', float('nan')):.2f} | "
                   f"{c.get('fxgraph_cache_hit', 0)}/{c.get('fxgraph_cache_miss', 0)} | "
                   f"{c.get('autograd_cache_hit', 0)}/{c.get('autograd_cache_miss', 0)} | "
                   f"{c.get('dynamo_cache_hit', 0)}/{c.get('dynamo_cache_miss', 0)} | "
                   f"{'yes' if 'torch._dynamo' in r.get('heavy_modules', ()) else 'no'} | "
                   f"{r.get('steady_ms', float('nan')):.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--case", action="append", default=[],
                    help="words of a benchmarks/models.py case label (repeatable)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help=f"comma-separated, of: {', '.join(BACKENDS)} (default: all)")
    ap.add_argument("--threads", type=int, default=0,
                    help="OMP_NUM_THREADS of the processes (CPU: 1 keeps their CPU seconds "
                    "from counting spinning threads on a loaded machine)")
    ap.add_argument("--repeat", type=int, default=1, help="second processes per case (default 1)")
    ap.add_argument("--cache-dir", default=None, help="keep the caches here (default: a temp folder)")
    ap.add_argument("--profile-dir", default=None, help="cProfile each process's first call here")
    ap.add_argument("--shared-cache", action="store_true",
                    help="with --cache-dir: later cases start from the caches the earlier ones left "
                    "(their cold row is a new layer on a machine that compiled another one)")
    ap.add_argument("--second-only", action="store_true",
                    help="with --cache-dir: keep its caches and run only the second processes (e.g. "
                    "again in another environment, after a run that made them)")
    ap.add_argument("--json", default=None, help="also write the JSON to this file")
    ap.add_argument("--list", action="store_true", help="print the default cases and exit")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="pkc", help=argparse.SUPPRESS)
    ap.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.device, args.backend, args.profile)), flush=True)
        os._exit(0)  # the process group and Inductor's worker pool need no orderly teardown
    cases = args.case or DEFAULT_CASES[args.device]
    if args.list:
        print("\n".join(cases))
        return 0
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"--backends: unknown backend {b!r} (one of {', '.join(BACKENDS)})")
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)     # the processes inherit it
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
    rows = []
    for case in cases:
        if args.second_only and not args.cache_dir:
            ap.error("--second-only needs --cache-dir (the caches of an earlier run)")
        rows += measure(case, args.device, backends, args.repeat, args.cache_dir, args.profile_dir,
                        keep=args.shared_cache and bool(rows), second_only=args.second_only)
    print(table(rows))
    text = json.dumps({"device": args.device, "rows": rows})
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
