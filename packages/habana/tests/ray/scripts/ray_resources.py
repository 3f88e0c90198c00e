"""Start a local Ray cluster and write, as JSON to OUT, what Ray and its workers see of the HPUs.

usage: ray_resources.py OUT [WORKERS]

Keys: ``resources`` (``ray.cluster_resources()``); with WORKERS > 0 also ``workers``, one entry per actor that
reserved one HPU (all alive at once): its ``HABANA_VISIBLE_MODULES`` and the SDK's ``hpu.device_count()``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from typing import Any

import ray

OUT, WORKERS = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0


@ray.remote(num_cpus=0, resources={"HPU": 1})
class HoldsOneHPU:
    def seen(self) -> dict[str, Any]:
        import habana_frameworks.torch.hpu as hpu

        return {"visible_modules": os.environ.get("HABANA_VISIBLE_MODULES"), "device_count": hpu.device_count()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        dashboard_port=_free_port(),  # Ray's head still serves its state API there (8265 by default)
        _temp_dir=tempfile.mkdtemp(prefix="ray-"),
        log_to_driver=False,
    )
    try:
        report: dict[str, Any] = {"resources": ray.cluster_resources()}
        if WORKERS:
            holders = [HoldsOneHPU.remote() for _ in range(WORKERS)]  # type: ignore[attr-defined]
            report["workers"] = ray.get([holder.seen.remote() for holder in holders])
    finally:
        ray.shutdown()
    with open(OUT, "w") as file:
        json.dump(report, file)


if __name__ == "__main__":
    main()
