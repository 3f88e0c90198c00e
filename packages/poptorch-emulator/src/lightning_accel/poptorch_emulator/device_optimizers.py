"""torch's SGD and RMSprop updates, keeping the velocity PopART keeps when the momentum is a variable at 0.

PopART keeps a velocity tensor for every weight whose momentum is not a constant 0 (SGD's ``hasMomentum``,
popart ``willow/src/sgd.cpp:152-155``; RMSprop's ``useMomentum``, ``patterns/adaptivedecompose.cpp:97-100``): a
momentum passed explicitly to a ``poptorch.optim`` optimizer is variable, so even at 0 its velocity exists, and each
step sets it (``v = 0 * v + ...``). torch keeps no velocity at momentum 0. These optimizers run torch's update
unchanged and, in the parameter groups marked :data:`VELOCITY` whose momentum is 0, set the velocity afterwards as
PopART's update leaves it: SGD's ``(1 - dampening) * (grad + weight_decay * weight)`` (``willow/include/popart/
sgd.hpp:86-94``, in torch's units), RMSprop's ``grad / (sqrt(square_avg) + eps)`` (centred: of
``square_avg - grad_avg**2``), with the gradient and weight before the update.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["VELOCITY", "DeviceRMSprop", "DeviceSGD"]

# The parameter group key that marks a group whose momentum PopART keeps a velocity for.
VELOCITY = "popart_velocity"


def _directions(optimizer: torch.optim.Optimizer) -> list[tuple[dict[str, Any], torch.Tensor, torch.Tensor]]:
    """``(group, weight, grad + weight_decay * weight)`` of the weights whose velocity torch will not update."""
    found = []
    for group in optimizer.param_groups:
        if not group.get(VELOCITY) or group["momentum"] > 0:
            continue
        for param in group["params"]:
            if param.grad is not None:
                direction = param.grad.detach().clone()
                if group["weight_decay"]:
                    direction.add_(param.detach(), alpha=group["weight_decay"])
                found.append((group, param, direction))
    return found


class DeviceSGD(torch.optim.SGD):
    """torch's SGD, with the velocity of variable-momentum groups at momentum 0 as PopART's.

    Example:
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> opt = DeviceSGD([{"params": [w], VELOCITY: True}], lr=0.1, momentum=0.0)
        >>> w.grad = torch.full((1,), 2.0)
        >>> opt.step()
        >>> float(w.detach()), float(opt.state[w]["momentum_buffer"])
        (0.800000011920929, 2.0)
    """

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """Run torch's update, then set the velocities torch leaves alone."""
        pending = _directions(self)
        loss = super().step(closure)
        for group, param, direction in pending:
            self.state[param]["momentum_buffer"] = direction.mul_(1 - group["dampening"])
        return loss


class DeviceRMSprop(torch.optim.RMSprop):
    """torch's RMSprop, with the momentum of variable-momentum groups at momentum 0 as PopART's.

    Example:
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> opt = DeviceRMSprop([{"params": [w], VELOCITY: True}], lr=0.1, alpha=0.0, eps=0.0)
        >>> w.grad = torch.full((1,), 2.0)
        >>> opt.step()
        >>> float(opt.state[w]["momentum_buffer"])  # 2 / sqrt(4)
        1.0
    """

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """Run torch's update, then set the momenta torch leaves alone, from the averages it has just updated."""
        pending = _directions(self)
        loss = super().step(closure)
        for group, param, direction in pending:
            state = self.state[param]
            square_avg = state["square_avg"]
            if group["centered"]:
                square_avg = square_avg.addcmul(state["grad_avg"], state["grad_avg"], value=-1)
            state["momentum_buffer"] = direction.div_(square_avg.sqrt().add_(group["eps"]))
        return loss
