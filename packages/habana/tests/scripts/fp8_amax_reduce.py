"""One rank of the fp8 amax reduction test: two forwards of a Transformer Engine layer with this rank's input peak.

Usage: ``RANK=r MASTER_ADDR=... MASTER_PORT=... python fp8_amax_reduce.py REDUCE_AMAX(0|1)``; prints this rank's
forward input scale after the second forward as JSON.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from lightning_accel.habana import sdk

sdk.hccl_module()  # registers the "hccl" backend
dist.init_process_group(sdk.distributed_backend(), rank=int(os.environ["RANK"]), world_size=2)
te = sdk.transformer_engine_module()
recipe = te.recipe.DelayedScaling(fp8_format=te.recipe.Format.HYBRID, reduce_amax=sys.argv[1] == "1")
layer = te.Linear(8, 2, bias=False)
peak = 3.0 * (dist.get_rank() + 1)
for _ in range(2):
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        layer(torch.full((2, 8), peak, device="hpu"))
print(json.dumps({"rank": dist.get_rank(), "scale": float(layer.fp8_meta["scaling_fwd"].scale[0])}))
dist.destroy_process_group()
