"""Named pipelines. ``default`` takes imported graph-level IR to fused kernel-level IR:

    collective-views   move reshapes across collectives, so that the matmul of a 3-d linear
                       layer meets its collective
    dce                drop the views left without users
    overlap            fuse matmul -> reduce_scatter / all_reduce, all_gather -> matmul and
                       all_to_all -> grouped matmul -> all_to_all into one kernel each, where
                       the cost model predicts the fused kernel beats the unfused sequence
    buffer-elision     producers write straight into their destinations (peers' outputs,
                       with add where results are summed); outputs live in symmetric memory
    lower-collectives  every collective left unfused becomes a kernel of puts and signals
                       (one-shot / two-shot all-reduce, direct / ring gather and scatter)
    sm-partition       every worker gets its SM count from the cost model and the target

A pipeline name can stand in a pipeline string like a pass: ``-p default``, or with options
``-p 'default{target=b200 force=true}'``; each option goes to the passes that have it.
"""

DEFAULT = (
    "collective-views", "dce", "overlap", "buffer-elision", "lower-collectives", "sm-partition",
)

PIPELINES: dict[str, tuple[str, ...]] = {"default": DEFAULT}
