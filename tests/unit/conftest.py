"""pytest set-up shared by the unit tests: the garbage collector's pace.

The tests build and drop many xDSL IR graphs (every op points at its parent, so most of
it is cyclic garbage) in processes that also hold torch's and xDSL's import-time objects.
With CPython's default thresholds (700, 10, 10) the collector runs every 700 net
allocations and rescans that whole heap often. Fewer, larger young collections cost the
same tests less: measured on the 2-core machine (test_overlap_scatter_dims +
test_interp_schedule + test_emu_kernels, one process, interleaved runs), 32.4 s of CPU
with the defaults, 28.8 s with the thresholds below, 28.3 s with the import-time objects
frozen as well; peak memory 418 -> 426 MB. A test that needs a collection at a given
point calls gc.collect() itself (test_collectives_vs_hand does).
"""

from __future__ import annotations

import gc

# young collections every 50,000 net allocations; older generations as rarely (CPython
# still runs a full collection only once the survivors grew by a quarter)
GC_THRESHOLDS = (50_000, 20, 100)


def pytest_configure(config):
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_finish(session):
    # what the imports and the collection built lives until the process exits: out of
    # the collector's view (gc.freeze), so no later collection scans it again
    gc.collect()
    gc.freeze()
