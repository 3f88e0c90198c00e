"""Checkpoints of an SGD optimizer written by lightning-accel's IPU emulator before it named PopART's inputs.

Until issue 47, the emulator gave SGD's ``ipu_param`` Adam's names (``learningRate___specific___<weight>``,
``weightDecay___specific___<weight>``) and kept torch's momentum buffer as the velocity. PopART's SGD names its
inputs after its compound scalars (``scaledLearningRate0``, ``weightDecayScaleFactor0``, ...; popart
``willow/include/popart/tensornames.hpp:206-295``), and its velocity carries the velocity scaling, which poptorch
sets to the loss scaling in the separate-accumulator variant (poptorch ``popart_compiler/source/CompilerImpl.cpp:
819-826, 855-860``; popart ``willow/include/popart/sgd.hpp:110-126``). The combined variant's ``Accl___<weight>``
also holds the next step's weight-decay term (``sgd.hpp:241-257``), which the old value lacks.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lightning_accel.core.errors import ConfigurationError

__all__ = ["upgrade_older_emulator_state"]

_OLD_SGD_INPUT = "learningRate___"


def upgrade_older_emulator_state(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``state`` as PopART names it, if an older emulator wrote it for the SGD ``optimizer``; else ``state``.

    The separate variant's velocities (``Accl1___``) are scaled by the loss scaling and the old inputs dropped: PopART
    refills its inputs from the optimizer's hyper-parameters, which the checkpoint's ``param_groups`` restore.

    Raises:
        ConfigurationError: For the combined variant's velocities (``Accl___``), which cannot be converted.
    """
    params = state.get("ipu_param")
    if not isinstance(optimizer, torch.optim.SGD) or not isinstance(params, dict):
        return state
    if not any(name.startswith(_OLD_SGD_INPUT) for name in params):
        return state
    velocities = dict(state.get("ipu_state") or {})
    combined = sorted(name for name in velocities if name.startswith("Accl___"))
    if combined:
        raise ConfigurationError(
            "The checkpoint's SGD optimizer state was written by lightning-accel's IPU emulator before it used "
            f"PopART's names (ipu_param holds {_OLD_SGD_INPUT}specific___*), and its combined velocities "
            f"({combined[0]}, ...; use_combined_accum=True) cannot be converted. To resume without them, delete "
            "'ipu_state' and 'ipu_param' from checkpoint['optimizer_states'][0] (torch.load, then torch.save) and "
            "resume from the edited checkpoint: the weights, hyper-parameters and schedulers come back."
        )
    scaling = float(getattr(optimizer, "loss_scaling", 1.0))
    upgraded = {
        name: value * scaling if name.startswith("Accl1___") and isinstance(value, torch.Tensor) else value
        for name, value in velocities.items()
    }
    rank_zero_warn(
        "The checkpoint's SGD optimizer state was written by an older lightning-accel IPU emulator: its velocities "
        "were converted to PopART's (Accl1___ times the loss scaling) and its optimizer inputs "
        f"({_OLD_SGD_INPUT}specific___*) dropped; PopART computes them from the restored hyper-parameters. Save a "
        "new checkpoint to keep the current format."
    )
    return {**state, "ipu_state": upgraded, "ipu_param": {}}
