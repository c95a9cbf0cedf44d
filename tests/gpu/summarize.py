"""Summary table of the GPU test groups (junit XML files in a folder), printed last."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])
rows = []
for f in sorted(out.glob("junit_*.xml")):
    suite = ET.parse(f).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    cases = list(suite.iter("testcase"))
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    rows.append((f.stem[6:], len(cases) - len(failed) - skipped, len(failed), skipped,
                 float(suite.get("time", 0)), failed))
print(f"{'group':10s} {'passed':>6s} {'failed':>6s} {'skipped':>7s} {'time':>7s}")
for g, p, fl, s, t, names in rows:
    print(f"{g:10s} {p:6d} {fl:6d} {s:7d} {t:7.1f}")
    for n in names[:12]:
        print(f"    FAILED {n}")
