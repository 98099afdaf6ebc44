"""`course-kit bench roofline`: the measured ceilings of notebook 00."""
from __future__ import annotations

from course_kit import bench, device
from course_kit.roofline import ceilings as roofline


@bench.topic("roofline", help="copy bandwidth and matmul TFLOP/s per dtype (the roofline of notebook 00)")
def run(params: dict) -> dict:
    d = device.defaults()
    copy_mib = int(params.get("copy_mib", d["copy_mib"]))
    matmul_n = int(params.get("matmul_n", d["matmul_n"]))
    repeat = int(params.get("repeat", d["repeat"]))
    rows = roofline.measure(copy_mib, matmul_n, repeat, device=params.get("device"))
    return {"params": {"copy_mib": copy_mib, "matmul_n": matmul_n, "repeat": repeat},
            "results": rows, "summary": roofline.summarise(rows, device.peaks())}
