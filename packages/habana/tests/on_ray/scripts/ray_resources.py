"""Start a local Ray cluster and write, as JSON to OUT, what Ray counts: ``{"resources": ray.cluster_resources()}``.

usage: ray_resources.py OUT [--open-hpu-first]

With ``--open-hpu-first`` the script opens this process's HPU (``hpu.init()``) before it starts Ray: Ray labels a
node with its accelerator type only when the HPU of the process that starts the node is already initialised
(``HPUAcceleratorManager.get_current_node_accelerator_type``).
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
from typing import Any

import ray

OUT = sys.argv[1]
OPEN_HPU_FIRST = "--open-hpu-first" in sys.argv[2:]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(session_dir: str) -> None:
    if OPEN_HPU_FIRST:
        import habana_frameworks.torch.hpu as hpu

        hpu.init()
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        dashboard_port=_free_port(),  # Ray's head still serves its state API there (8265 by default)
        _temp_dir=session_dir,
        log_to_driver=False,
    )
    try:
        report: dict[str, Any] = {"resources": ray.cluster_resources()}
    finally:
        ray.shutdown()
    with open(OUT, "w") as file:
        json.dump(report, file)


if __name__ == "__main__":
    # Ray's session files go to a short temporary folder (its socket paths must stay under the OS limit), removed
    # afterwards; a worker that is still shutting down may hold a file there.
    with tempfile.TemporaryDirectory(prefix="ray-", ignore_cleanup_errors=True) as session_dir:
        main(session_dir)
