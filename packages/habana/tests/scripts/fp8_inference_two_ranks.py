"""One rank of the fp8 inference refusal test: a model prepared for measuring before the two processes join, then one
forward context in the two-process run.

Usage: ``RANK=r MASTER_ADDR=... MASTER_PORT=... python fp8_inference_two_ranks.py DATA_DIR``; prints the error the
forward context raised, or ``no error``.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import HPUPrecisionPlugin, sdk

plugin = HPUPrecisionPlugin("fp8")
model = torch.nn.Sequential(torch.nn.Linear(4, 4))
plugin.convert_modules(model, inference=True, quant=False, fp8_data_path=os.path.join(sys.argv[1], os.environ["RANK"]))
sdk.hccl_module()  # registers the "hccl" backend
dist.init_process_group(sdk.distributed_backend(), rank=int(os.environ["RANK"]), world_size=2)
try:
    with plugin.forward_context():
        pass
    print("no error")
except ConfigurationError as exc:
    print(f"refused: {exc}")
dist.destroy_process_group()
