"""Notebook 06 (batching): the engine served, loaded and watched. The engine itself (scheduler,
block manager, model runner) is `course_kit.engine`, shared with notebooks 07 and 10.

    live        one live run of the engine for the batching widget: policy, slots, chunk size,
                arrival rate (section "Continuous batching, live")
    server      an async completion server around the engine: `course-kit serve` (section
                "Serving")
    guard       the server's guards against hostile request bodies
    client      streaming open-loop load clients for `course-kit bench serving`
    loadgen     the arithmetic of a load test: arrivals, percentiles, saturation

Widget `widgets/batching.py`, figures `plots/batching.py` and `plots/serving.py`, records
`course-kit bench batching` and `bench serving`, checks `grading/checks/nb06.py`.
"""
