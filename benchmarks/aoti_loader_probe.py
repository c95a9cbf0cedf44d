"""Why AOTInductor packages crash torch's loader on a machine, and which build or load fixes it.

Journal 2026-12-02 (k): on the H200 machine (torch 2.11.0+cu130, g++ 13.3) every
AOTInductor package, torch's own toy included, dies with SIGSEGV in
``torch::aot_inductor::parse_device_str`` -> ``std::regex`` ->
``regex_traits<char>::transform_primary`` -> a call landing in
``std::codecvt<char16_t>::do_unshift``: a locale facet taken by an index that names another
facet. This script checks, each step in its own subprocess (a crash ends only that step):

1. ``facts``: versions, torch's C++ ABI, which loaded libraries define libstdc++'s locale
   facet ids (``nm -D --defined-only``), the wrapper-free view.
2. ``tiny``: a small C++ library (g++ here, no torch) that compiles the same ``std::regex``
   and reports which library owns ``std::collate<char>::id`` as it sees it (``dladdr``) and
   the dynamic type of the ``collate<char>`` facet it gets (``typeid``), built with several
   flag sets and loaded (``ctypes``, RTLD_LOCAL as torch's loader does) in a python without
   torch, after ``import torch``, and after ``import torch`` + CUDA initialised.
3. ``aoti``: torch's own ``torch.export`` + ``aoti_compile_and_package`` of a toy module with
   the compiler commands recorded; its wrapper's ELF facts; the wrapper's link command re-run
   with candidate flag sets; each variant loaded (container runner and the package loader on a
   package with the variant's ``.so``) and run against eager in a fresh process.

``python benchmarks/aoti_loader_probe.py --out DIR [--budget-s S]``; prints a short table and
writes ``DIR/aoti_probe.json``. Measurements go in docs/PERF_NOTES.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

IDS = {"collate11": "_ZNSt7__cxx117collateIcE2idE", "collate": "_ZNSt7collateIcE2idE", "ctype": "_ZNSt5ctypeIcE2idE",
       "codecvt16": "_ZNSt7codecvtIDsc11__mbstate_tE2idE", "refcount": "_ZNSt6locale2id11_S_refcountE",
       "classic": "_ZNSt6locale7classicEv", "locale_ctor": "_ZNSt6localeC1Ev"}

TINY = r"""
#include <regex>
#include <string>
#include <locale>
#include <typeinfo>
#include <cstdio>
#include <dlfcn.h>
static const char* owner(const void* p) { Dl_info i; return dladdr(p, &i) && i.dli_fname ? i.dli_fname : "?"; }
extern "C" int tiny_report(char* buf, int n) {
  std::locale loc;
  const std::collate<char>& c = std::use_facet<std::collate<char>>(loc);
  return snprintf(buf, n, "collate_id_owner=%s collate_index=%zu ctype_id_owner=%s ctype_index=%zu "
                  "collate_facet_type=%s locale_ctor_owner=%s",
                  owner(&std::collate<char>::id), std::collate<char>::id._M_id(),
                  owner(&std::ctype<char>::id), std::ctype<char>::id._M_id(),
                  typeid(c).name(), owner((const void*)&std::locale::classic));
}
extern "C" int tiny_parse(const char* s) {
  std::regex re("(cpu|cuda|xpu|mps)(:([0-9]+))?");
  std::smatch sm;
  std::string str(s);
  if (!std::regex_match(str, sm, re)) return -2;
  return sm[3].matched ? std::stoi(sm[3].str()) : -1;
}
"""

LOAD_TINY = r"""
import ctypes, os, sys
mode = sys.argv[2]
if "preload" in mode:
    ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL)
if "torch" in mode:
    import torch
    if "cuda" in mode and torch.cuda.is_available():
        torch.zeros(1, device="cuda")
if "promote" in mode:
    ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
buf = ctypes.create_string_buffer(2048)
lib.tiny_report(buf, 2048)
print(buf.value.decode(), flush=True)
print("parse", lib.tiny_parse(b"cuda:0"), flush=True)
"""

# the toy: Linear, SiLU, Linear, residual (bf16); the builder records every compiler command
BUILD = r"""
import json, sys, time, torch
import torch._inductor.cpp_builder as cb
import os, shlex, shutil
cmds = []
orig = cb._run_compile_cmd
keep = sys.argv[1] + ".objs"
def rec(cmd_line, cwd):
    entry = {"cmd": cmd_line, "cwd": cwd}
    parts = shlex.split(cmd_line)
    if "-o" in parts and parts[parts.index("-o") + 1].endswith(".so"):
        # the link step: its objects are deleted after the build; keep them for relinking
        os.makedirs(keep, exist_ok=True)
        for i, p in enumerate(parts):
            if p.endswith(".o") and os.path.isfile(p):
                parts[i] = shutil.copy(p, os.path.join(keep, os.path.basename(p)))
        entry["relink"] = shlex.join(parts)
    cmds.append(entry)
    t0 = time.perf_counter(); orig(cmd_line, cwd); cmds[-1]["s"] = round(time.perf_counter() - t0, 2)
cb._run_compile_cmd = rec
class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.a = torch.nn.Linear(64, 128); self.b = torch.nn.Linear(128, 64)
    def forward(self, x):
        return x + self.b(torch.nn.functional.silu(self.a(x)))
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
m = Toy().to(dev).to(torch.bfloat16)
x = torch.randn(32, 64, device=dev, dtype=torch.bfloat16)
t0 = time.perf_counter()
ep = torch.export.export(m, (x,))
path = torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[1])
s = time.perf_counter() - t0
torch.save({"state": m.state_dict(), "x": x, "y": m(x)}, sys.argv[1] + ".ref.pt")
json.dump({"s": round(s, 2), "path": path, "cmds": cmds}, open(sys.argv[1] + ".json", "w"), indent=1)
print("built", round(s, 2))
"""

LOAD_PKG = r"""
import sys, torch
ref = torch.load(sys.argv[1] + ".ref.pt")
how = sys.argv[2]
if how.startswith("runner"):
    if how == "runner_deepbind":
        # the wrapper opened first with its own dependencies ahead of the global scope; the
        # runner's dlopen of the same path then gets this already relocated copy
        import ctypes, os
        ctypes.CDLL(sys.argv[3], mode=os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
    if not torch.cuda.is_available():
        r = torch._C._aoti.AOTIModelContainerRunnerCpu(sys.argv[3], 1)
    else:
        R = torch._C._aoti.AOTIModelContainerRunnerCuda
        try:
            r = R(sys.argv[3], 1, "cuda:0", sys.argv[4])
        except TypeError:
            r = R(sys.argv[3], 1)
    print("runner ctor ok", flush=True)
    sys.exit(0)
loader = torch._C._aoti.AOTIModelPackageLoader(sys.argv[1], "model", False, 1, 0 if torch.cuda.is_available() else -1)
print("loader ok", flush=True)
out = loader.boxed_run([ref["x"]])
torch.cuda.is_available() and torch.cuda.synchronize()
err = (out[0].float() - ref["y"].float()).abs().max().item()
print(f"run ok max_abs_err={err:.4f}", flush=True)
sys.exit(0 if err < 0.1 else 3)
"""


def sh(cmd: str | list, timeout: float = 60, env: dict | None = None, cwd: str | None = None,
       keep: int = 1500) -> dict:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, timeout=timeout,
                           env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        out = (r.stdout + r.stderr).strip()
        return {"rc": r.returncode, "out": out[-keep:], "s": round(time.perf_counter() - t0, 2)}
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "out": "", "s": round(time.perf_counter() - t0, 2)}


def ld_grep(prefix: str, obj: str) -> str:
    """From LD_DEBUG=scopes,bindings files ``prefix.*``: how ``obj``'s and libstdc++'s locale ids
    bind, which libraries other than libstdc++ supply ``obj``'s std:: symbols, ``obj``'s scope."""
    ids = "|".join(re.escape(v) for k, v in IDS.items() if k != "classic")
    q = shlex.quote
    cmd = (f"cat {prefix}.* > {prefix}.all; "
           f"echo '# locale ids'; grep -E \"{ids}\" {prefix}.all | grep -E {q('binding file [^ ]*(' + obj + '|libstdc)')} | "
           f"sed -E 's/^ *[0-9]+: *//; s/ \\[[0-9]+\\]//g; s#/[^ ]*/##g' | sort | uniq -c | head -20; "
           f"echo '# std:: of obj bound outside libstdc++ (count by target)'; "
           f"grep -E {q('binding file [^ ]*' + obj)} {prefix}.all | grep -E 'symbol .(_ZNK?St|_ZSt)' | "
           f"grep -v 'to /[^ ]*libstdc' | grep -v {q('to [^ ]*' + obj)} | sed -E 's/.* to ([^ ]*) .*/\\1/' | sort | uniq -c | head; "
           f"grep -E {q('binding file [^ ]*' + obj)} {prefix}.all | grep -E 'symbol .(_ZNK?St|_ZSt)' | "
           f"grep -v 'to /[^ ]*libstdc' | grep -v {q('to [^ ]*' + obj)} | sed -E 's/.* to [^ ]*\\/([^ /]*) .*symbol .([^ ]*).*/\\1 \\2/' | "
           f"cut -c1-150 | head -14; "
           f"echo '# scope'; grep -A3 {q('object=.*' + obj)} {prefix}.all | sed -E 's/^ *[0-9]+: *//; s#/[^ ]*/##g' | "
           f"cut -c1-1500 | head -5; du -sh {prefix}.all; rm -f {prefix}.*")
    return sh(cmd, 90, keep=6000)["out"]


def facts(work: Path, env: dict) -> dict:
    import torch
    res: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                 "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI), "python": sys.version.split()[0]}
    res["gxx"] = sh("g++ --version | head -1")["out"]
    res["config_head"] = torch.__config__.show().splitlines()[1:4]
    res["libstdcxx"] = sh("ls -l /lib/x86_64-linux-gnu/libstdc++.so.6*; "
                          "strings /lib/x86_64-linux-gnu/libstdc++.so.6 | grep -E '^GLIBCXX_3\\.4\\.[0-9]+$' "
                          "| sort -V | tail -1")["out"]
    maps = sh([sys.executable, "-c", "import torch; torch.cuda.is_available() and torch.zeros(1, device='cuda'); "
               "import re; print('\\n'.join(dict.fromkeys(l.split()[-1] for l in open('/proc/self/maps') "
               "if '.so' in l.split()[-1])))"], 90, env, keep=1 << 20)
    libs = [p for p in maps["out"].splitlines() if p.startswith("/")]
    providers: dict = {k: [] for k in IDS}
    std_exports = {}
    for lib in libs:
        nm = sh(["nm", "-D", "--defined-only", lib], 60, keep=1 << 30)["out"]
        names = {ln.split()[-1].split("@")[0] for ln in nm.splitlines() if ln.strip()}
        for k, sym in IDS.items():
            if sym in names:
                providers[k].append(os.path.basename(lib))
        n = sum(1 for s in names if s.startswith(("_ZNSt", "_ZSt", "_ZNKSt")))
        if n:
            std_exports[os.path.basename(lib)] = n
    res["id_providers"] = providers
    res["libs_exporting_std"] = dict(sorted(std_exports.items(), key=lambda kv: -kv[1])[:12])
    res["n_libs"] = len(libs)
    return res


def tiny(work: Path, env: dict, extra_link: list[str]) -> dict:
    src = work / "tiny.cpp"
    src.write_text(TINY)
    (work / "load_tiny.py").write_text(LOAD_TINY)
    import torch
    tlib = str(Path(torch.__file__).parent / "lib")
    base = ["g++", "-std=c++17", "-O2", "-fPIC", "-shared", str(src)]
    variants = {
        "plain": [],
        "aoti_cflags": ["-O3", "-DNDEBUG", "-ffast-math", "-fno-finite-math-only", "-fno-unsafe-math-optimizations",
                        "-ffp-contract=off", "-fno-tree-loop-vectorize", "-march=native", "-D_GLIBCXX_USE_CXX11_ABI=1"],
        "link_torch": [f"-L{tlib}", f"-Wl,-rpath,{tlib}", "-Wl,--no-as-needed", "-ltorch", "-ltorch_cpu", "-lc10",
                       "-ltorch_cuda"],
        "link_torch_bsym": [f"-L{tlib}", f"-Wl,-rpath,{tlib}", "-Wl,--no-as-needed", "-ltorch", "-ltorch_cpu",
                            "-lc10", "-ltorch_cuda", "-Wl,-Bsymbolic"],
        "abi0": ["-D_GLIBCXX_USE_CXX11_ABI=0"],
        "bsymbolic": ["-Wl,-Bsymbolic"],
        "static_cxx": ["-static-libstdc++", "-static-libgcc"],
        "static_cxx_hidden": ["-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic"],
    }
    if extra_link:
        variants["wrapper_flags"] = extra_link
    built = {}
    for name, flags in variants.items():
        out = work / f"tiny_{name}.so"
        r = sh(base + flags + ["-o", str(out), "-ldl"], 120)
        built[name] = str(out) if r["rc"] == 0 else f"build failed: {r['out'][-300:]}"
    modes = ["none", "torch", "torch_cuda", "preload_torch_cuda", "torch_cuda_promote"]
    jobs = {}
    with cf.ThreadPoolExecutor(8) as ex:
        for name, so in built.items():
            if not so.startswith("/"):
                continue
            for mode in modes if name in ("plain", "link_torch", "static_cxx_hidden") else ["none", "torch_cuda"]:
                jobs[(name, mode)] = ex.submit(sh, [sys.executable, str(work / "load_tiny.py"), so, mode], 90, env)
        dbg = {}
        for name in ("plain", "link_torch"):
            if built[name].startswith("/"):
                e2 = {**env, "LD_DEBUG": "scopes,bindings", "LD_DEBUG_OUTPUT": str(work / f"ldt_{name}")}
                dbg[name] = ex.submit(sh, [sys.executable, str(work / "load_tiny.py"), built[name], "torch_cuda"], 90, e2)
        dbg = {n: (f.result()["rc"], ld_grep(str(work / f"ldt_{n}"), f"tiny_{n}.so")) for n, f in dbg.items()}
    rows = []
    for (name, mode), fut in jobs.items():
        r = fut.result()
        rows.append({"so": name, "mode": mode, "rc": r["rc"], "out": r["out"][-600:]})
    return {"built": {k: v for k, v in built.items() if not v.startswith("/")}, "rows": rows, "ld_debug": dbg}


def _variant_cmd(cmd: str, out_so: str, add: list[str], drop: tuple = ()) -> str:
    parts = [p for p in shlex.split(cmd) if p not in drop]
    i = parts.index("-o")
    parts[i + 1] = out_so
    return shlex.join(parts + add)


def _repackage(pt2: str, so_name: str, so_path: str, dest: str) -> None:
    with zipfile.ZipFile(pt2) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith(so_name):
                data = Path(so_path).read_bytes()
            zout.writestr(item, data)


def aoti(work: Path, env: dict, deadline: float) -> dict:
    (work / "build.py").write_text(BUILD)
    (work / "load_pkg.py").write_text(LOAD_PKG)
    pt2 = str(work / "toy.pt2")
    b = sh([sys.executable, str(work / "build.py"), pt2], max(10, deadline - time.time() - 60), env)
    res: dict = {"build": {k: b[k] for k in ("rc", "s")}}
    if b["rc"] != 0:
        res["build"]["out"] = b["out"][-800:]
        return res
    info = json.loads(Path(pt2 + ".json").read_text())
    res["build"]["inner_s"] = info["s"]
    res["cmds"] = [{"cmd": c["cmd"][:200], "s": c.get("s")} for c in info["cmds"]]
    links = [c for c in info["cmds"] if "relink" in c]
    link = next((c for c in reversed(links) if "wrapper" in c["relink"]), links[-1] if links else None)
    if link is None:
        res["note"] = "no .so link command recorded"
        return res
    link = {"cmd": link["relink"], "cwd": str(work)}
    so = shlex.split(link["cmd"])[shlex.split(link["cmd"]).index("-o") + 1]
    res["wrapper"] = so
    res["elf"] = {
        "dynamic": sh(f"readelf -d {shlex.quote(so)} | grep -E 'NEEDED|FLAGS|RUNPATH|RPATH|SONAME'")["out"],
        "std_defined_dyn": sh(f"nm -D --defined-only {shlex.quote(so)} | grep -c -E ' _Z(NK?)?St'")["out"],
        "ids_defined": sh(f"nm --defined-only {shlex.quote(so)} | grep -E '2idE|_S_refcount|codecvtIDs' | head")["out"],
        "locale_code": sh(f"nm -C --defined-only {shlex.quote(so)} | grep -E 'codecvt<char16_t|locale::_Impl|"
                          f"locale::locale\\(\\)' | head -8")["out"],
        "ldd": sh(f"ldd {shlex.quote(so)} | grep -E 'stdc|torch|c10|gcc'")["out"],
        "link_cmd": link["cmd"][:2500],
    }
    # which library each of the wrapper's locale-id references binds to, and libstdc++'s own
    def ld_debug() -> dict:
        ldbg = work / "ldbg"
        e2 = {**env, "LD_DEBUG": "scopes,bindings", "LD_DEBUG_OUTPUT": str(ldbg)}
        r = sh([sys.executable, str(work / "load_pkg.py"), pt2, "package"], max(5, deadline - time.time() - 15), e2)
        got = ld_grep(str(ldbg), "wrapper.so")
        return {"rc": r["rc"], "out": r["out"][-300:], "s": r["s"], "grep": got}

    # the link command again with candidate flags; each variant loaded in a fresh process
    variants = {
        "as_built": None,
        "relink_same": ([], ()),
        "bsymbolic": (["-Wl,-Bsymbolic"], ()),
        "no_static_cxx": ([], ("-static-libstdc++", "-static-libgcc")),
        "static_cxx_hidden": (["-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic"], ()),
        "abi_drop": ([], ("-D_GLIBCXX_USE_CXX11_ABI=0", "-D_GLIBCXX_USE_CXX11_ABI=1")),
    }
    outs = {}

    def relink(name: str, spec: tuple) -> dict:
        try:
            return _relink(name, spec)
        except Exception as err:  # noqa: BLE001 - reported, the others still run
            return {"rc": f"error {type(err).__name__}: {err}"[:300]}

    def _relink(name: str, spec: tuple) -> dict:
        vso = str(work / f"v_{name}" / os.path.basename(so))
        os.makedirs(os.path.dirname(vso), exist_ok=True)
        add, drop = spec
        if drop and not any(d in shlex.split(link["cmd"]) for d in drop):
            return {"rc": "skip (flag absent)"}
        rr = sh(_variant_cmd(link["cmd"], vso, add, drop), max(5, deadline - time.time() - 25), cwd=link["cwd"])
        if rr["rc"] != 0:
            return {"rc": rr["rc"], "out": rr["out"][-400:]}
        vpt2 = str(work / f"v_{name}.pt2")
        _repackage(pt2, os.path.basename(so), vso, vpt2)
        shutil.copy(pt2 + ".ref.pt", vpt2 + ".ref.pt")
        return {"rc": 0, "s": rr["s"], "pt2": vpt2, "so": vso}

    with cf.ThreadPoolExecutor(7) as ex:
        f_dbg = ex.submit(ld_debug)
        futs = {n: ex.submit(relink, n, s) for n, s in variants.items() if s is not None}
        outs = {n: f.result() for n, f in futs.items()}
        res["ld_debug"] = f_dbg.result()
    outs["as_built"] = {"rc": 0, "pt2": pt2, "so": so}
    loads = {}
    with cf.ThreadPoolExecutor(8) as ex:
        futs = {}
        for n, v in outs.items():
            if v.get("rc") != 0:
                continue
            futs[(n, "package")] = ex.submit(sh, [sys.executable, str(work / "load_pkg.py"), v["pt2"], "package"],
                                             max(5, deadline - time.time() - 5), env)
            hows = ["runner", "runner_deepbind"] if n == "as_built" else ["runner"]
            for how in hows:
                futs[(n, how)] = ex.submit(sh, [sys.executable, str(work / "load_pkg.py"), v["pt2"], how, v["so"],
                                                os.path.dirname(v["so"])], max(5, deadline - time.time() - 5), env)
            if n == "as_built":
                pre = {**env, "LD_PRELOAD": "/lib/x86_64-linux-gnu/libstdc++.so.6"}
                futs[(n, "package_ld_preload")] = ex.submit(
                    sh, [sys.executable, str(work / "load_pkg.py"), v["pt2"], "package"],
                    max(5, deadline - time.time() - 5), pre)
        for k, f in futs.items():
            r = f.result()
            loads[f"{k[0]}/{k[1]}"] = {"rc": r["rc"], "out": r["out"][-400:]}
    res["variants"] = {n: {k: v for k, v in o.items() if k not in ("pt2", "so")} for n, o in outs.items()}
    res["loads"] = loads
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=180)
    a = ap.parse_args()
    t0 = time.time()
    deadline = t0 + a.budget_s
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("PKC_AOTI_PROBE_DIR", "/tmp/pkc_aoti_probe"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONPYCACHEPREFIX": str(work / "pyc"), "TORCHINDUCTOR_CACHE_DIR": str(work / "ind"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # the bytecode cache above serves the many fresh processes
    res: dict = {}
    with cf.ThreadPoolExecutor(3) as ex:
        f_aoti = ex.submit(aoti, work, env, deadline)
        f_facts = ex.submit(facts, work, env)
        f_tiny = ex.submit(tiny, work, env, [])
        for name, fut in (("facts", f_facts), ("tiny", f_tiny), ("aoti", f_aoti)):
            try:
                res[name] = fut.result()
            except Exception as err:  # noqa: BLE001 - the others still report
                res[name] = {"error": f"{type(err).__name__}: {err}"}
            (out / "aoti_probe.json").write_text(json.dumps(res, indent=1, default=str))
    res["wall_s"] = round(time.time() - t0, 1)
    (out / "aoti_probe.json").write_text(json.dumps(res, indent=1, default=str))
    f = res.get("facts", {})
    print(f"torch {f.get('torch')} abi11={f.get('cxx11_abi')} | collate id in: "
          f"{f.get('id_providers', {}).get('collate')} | std exports: {list(f.get('libs_exporting_std', {}))[:5]}")
    by_so: dict = {}
    for row in res.get("tiny", {}).get("rows", []):
        by_so.setdefault(row["so"], []).append(f"{row['mode']}:{row['rc']}")
    for so, rcs in by_so.items():
        print(f"tiny {so:<18} " + " ".join(rcs))
    ao = res.get("aoti", {})
    print("aoti build", ao.get("build"), "| elf:", json.dumps(ao.get("elf", {}))[:300])
    for k, v in ao.get("loads", {}).items():
        print(f"load {k:<28} rc={v['rc']} {v['out'].splitlines()[-1][:100] if v['out'] else ''}")
    print("wall", res["wall_s"], "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
