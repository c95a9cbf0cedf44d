"""h8-fixedcost: the cases of benchmarks/fused_ir.py and fused_ar_ir.py (plus RS odd W = 1),
as (name, kind, W, M, N, K, layout, rounds); M = the product's rows."""
CASES = [
    # fused_ir.py (rs, M = W x Mc)
    ("rs odd W=2 (fresh)", "rs", 2, 1998, 776, 520, "nk", 250),
    ("rs odd W=3", "rs", 3, 3003, 584, 392, "nk", 250),
    ("rs odd W=4 kn", "rs", 4, 2068, 1048, 712, "kn", 250),
    ("rs odd W=3 kn", "rs", 3, 999, 264, 136, "kn", 300),
    ("rs 4096 W=2 (fresh)", "rs", 2, 4096, 4096, 4096, "nk", 20),
    ("rs 4096 W=4", "rs", 4, 4096, 4096, 4096, "nk", 20),
    # fused_ar_ir.py
    ("ar odd W=1", "ar", 1, 999, 776, 520, "nk", 300),
    ("rs odd W=1", "rs", 1, 999, 776, 520, "nk", 300),
    ("ar odd W=2", "ar", 2, 1999, 776, 520, "nk", 200),
    ("ar odd W=2 kn", "ar", 2, 333, 264, 136, "kn", 200),
    ("ar 4096 W=2", "ar", 2, 4096, 4096, 512, "nk", 25),
    ("ar llama-o W=2", "ar", 2, 4096, 8192, 1024, "nk", 20),
    ("rs 4096x4096x512 W=2 (fresh)", "rs", 2, 4096, 4096, 512, "nk", 25),
    ("rs 4096^3 W=1", "rs", 1, 4096, 4096, 4096, "nk", 20),
    ("ar 4096^3 W=1", "ar", 1, 4096, 4096, 4096, "nk", 20),
    ("rs 8192x8192x1024 W=1", "rs", 1, 8192, 8192, 1024, "nk", 20),
    ("ar 8192x8192x1024 W=1", "ar", 1, 8192, 8192, 1024, "nk", 20),
]


def fname(kind, W, M, N, K, lay):
    return f"{kind}_W{W}_{M}x{N}x{K}_{lay}"
