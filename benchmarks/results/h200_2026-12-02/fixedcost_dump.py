"""fixedcost_bench.py inputs: python fixedcost_dump.py ir OUTDIR | gemm PLANDIR OUTDIR (in a tree, cases.py beside)."""
import sys
if sys.argv[1] == 'ir':
    sys.argv = sys.argv[1:]
    import json, os, pickle, sys
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks"), os.path.dirname(__file__)]
    from cases import CASES, fname
    import fused_ar_ir
    from pkc.passes.remarks import plan_of
    out = sys.argv[1]; os.makedirs(out, exist_ok=True)
    for name, kind, W, M, N, K, lay, _ in CASES:
        ck, kop = fused_ar_ir.compile_ir(kind, W, M, N, K, lay)
        fn = os.path.join(out, fname(kind, W, M, N, K, lay))
        open(fn + ".ptx", "w").write(ck.ptx)
        pickle.dump(ck.meta, open(fn + ".meta.pkl", "wb"))
        p = {k: v for k, v in plan_of(kop).items() if isinstance(v, (int, str, bool, float))}
        json.dump(p, open(fn + ".plan.json", "w"))
        print(name, len(ck.ptx.splitlines()), p.get("bm"), p.get("bn"), p.get("fresh_output"))
else:
    sys.argv = sys.argv[1:]
    import json, os, pickle, sys
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks"), os.path.dirname(__file__)]
    from cases import CASES, fname
    from gemm_ir import compile_gemm, variant_of
    src, out = sys.argv[1], sys.argv[2]; os.makedirs(out, exist_ok=True)
    for name, kind, W, M, N, K, lay, _ in CASES:
        fn = fname(kind, W, M, N, K, lay)
        plan = json.load(open(os.path.join(src, fn + ".plan.json")))
        v = variant_of(plan)
        ck, kop = compile_gemm(M, N, K, v, lay)
        open(os.path.join(out, fn + ".gemm.ptx"), "w").write(ck.ptx)
        pickle.dump(ck.meta, open(os.path.join(out, fn + ".gemm.meta.pkl"), "wb"))
        print(name, v, len(ck.ptx.splitlines()))
