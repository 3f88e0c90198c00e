"""DeepSpeed inference (``deepspeed.init_inference``) for ``trainer.predict``: settings, checks and TP groups.

The settings come from the strategy's keyword arguments and from the inference keys of its config (the seed's three
ways: arguments, ``**kwargs``, config); keyword arguments win, as in ``deepspeed.init_inference``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lightning_accel.core.errors import ConfigurationError

if TYPE_CHECKING:
    import torch

__all__ = ["INFERENCE_KEYS", "InferenceSettings", "TensorParallelGroups", "split_inference_config"]

# The keys of DeepSpeed's inference config this strategy forwards to ``deepspeed.init_inference``.
INFERENCE_KEYS = frozenset(
    {
        "tensor_parallel",
        "mp_size",
        "dtype",
        "replace_with_kernel_inject",
        "injection_policy",
        "replace_method",
        "enable_cuda_graph",
        "triangular_masking",
        "return_tuple",
        "keep_module_on_host",
        "max_out_tokens",
        "min_out_tokens",
    }
)


def split_inference_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a config into its training part and its inference part (:data:`INFERENCE_KEYS`)."""
    training = {key: value for key, value in config.items() if key not in INFERENCE_KEYS}
    inference = {key: value for key, value in config.items() if key in INFERENCE_KEYS}
    return training, inference


@dataclass(frozen=True)
class InferenceSettings:
    """What ``trainer.predict`` passes to ``deepspeed.init_inference``.

    Attributes:
        options: The merged inference options (config first, keyword arguments over it).
    """

    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def merge(cls, from_config: Mapping[str, Any], from_kwargs: Mapping[str, Any]) -> InferenceSettings:
        """Merge the config's inference keys with the strategy's keyword arguments (which win).

        Raises:
            ConfigurationError: For a keyword argument that is not an inference option.
        """
        unknown = sorted(set(from_kwargs) - INFERENCE_KEYS)
        if unknown:
            raise ConfigurationError(
                f"HPUDeepSpeedStrategy got unexpected keyword argument(s) {', '.join(unknown)}. Accepted besides the "
                f"named arguments: the DeepSpeed inference options {', '.join(sorted(INFERENCE_KEYS))}."
            )
        options = {**from_config, **from_kwargs}
        if "mp_size" in options and "tensor_parallel" not in options:
            options["tensor_parallel"] = {"tp_size": options.pop("mp_size")}
        return cls(options)

    @property
    def active(self) -> bool:
        """Whether prediction goes through ``deepspeed.init_inference`` (any inference option was given)."""
        return bool(self.options)

    @property
    def tp_size(self) -> int:
        """The tensor-parallel size (1 without tensor parallelism).

        Raises:
            ConfigurationError: When ``tp_size`` is not a positive int.
        """
        tensor_parallel = self.options.get("tensor_parallel")
        if isinstance(tensor_parallel, Mapping):
            size = tensor_parallel.get("tp_size", 1)
        else:
            size = getattr(tensor_parallel, "tp_size", 1)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(
                f"tensor_parallel={{'tp_size': {size!r}}} is not a tensor-parallel size. Accepted: a positive int that "
                "divides the number of processes (devices x num_nodes), e.g. tensor_parallel={'tp_size': 2} on 2 HPUs. "
                "Fix: pass such an int, or leave tensor_parallel out."
            )
        return size

    def validate(self, world_size: int, has_inference_kernels: bool, lazy: bool) -> None:
        """Refuse what cannot run here: kernel injection, graphs, a TP size that does not divide the world.

        Args:
            world_size: The number of processes.
            has_inference_kernels: Whether DeepSpeed ships its ``transformer_inference`` op (Intel's DeepSpeed for
                Gaudi does; upstream DeepSpeed does not, and its HPU builder cannot compile one).
            lazy: Whether the SDK runs in lazy mode, where HPU graphs can be created (SDK 1.19 exports them in lazy
                mode only; from the 1.24 period on they are exported in eager mode too, and creating one raises).

        Raises:
            ConfigurationError: Naming the option, its value and the fix.
        """
        if self.options.get("replace_with_kernel_inject") and not has_inference_kernels:
            raise ConfigurationError(
                "replace_with_kernel_inject=True needs DeepSpeed's fused HPU inference kernels (its "
                "'transformer_inference' op), which this DeepSpeed installation does not ship: upstream DeepSpeed "
                "has none for HPUs; Intel's DeepSpeed for Gaudi does. Accepted here: replace_with_kernel_inject=False "
                "(tensor parallelism by injection_policy or automatic TP still works), or install Intel's DeepSpeed."
            )
        # The SDK's mode decides, not whether hpu.HPUGraph exists: DeepSpeed's HPU accelerator creates its graphs with
        # hpu.HPUGraph(), which from the 1.24 period on exists in eager mode too and raises there at the first forward.
        if self.options.get("enable_cuda_graph") and not lazy:
            raise ConfigurationError(
                "enable_cuda_graph=True records the model as an HPU graph, which the Habana SDK offers in lazy mode "
                "only (PT_HPU_LAZY_MODE=1 when the process starts; eager is the default, and in eager mode SDK 1.24 "
                "refuses to create a graph). Accepted in eager mode: enable_cuda_graph=False."
            )
        size = self.tp_size
        if size < 1 or world_size % size:
            raise ConfigurationError(
                f"tensor_parallel={{'tp_size': {size}}} must be a positive divisor of the number of processes "
                f"({world_size} = devices x num_nodes). Fix: pick a tp_size that divides "
                f"{world_size}, or change devices."
            )
        if size > 1 and importlib.util.find_spec("transformers") is None:
            raise ConfigurationError(
                f"tensor_parallel={{'tp_size': {size}}} uses DeepSpeed's tensor slicing (AutoTP or injection_policy), "
                "which imports the 'transformers' package, and it is not installed. Fix: `pip install transformers`, "
                "or predict without tensor_parallel."
            )

    def init_kwargs(self, dtype: torch.dtype, groups: TensorParallelGroups | None) -> dict[str, Any]:
        """Keyword arguments for ``deepspeed.init_inference`` (``dtype`` defaults to the precision's dtype)."""
        kwargs = dict(self.options)
        kwargs.setdefault("dtype", dtype)
        kwargs.setdefault("replace_with_kernel_inject", False)
        if isinstance(kwargs.get("injection_policy"), Mapping):
            kwargs["injection_policy"] = {
                module: _policy_names(names) for module, names in kwargs["injection_policy"].items()
            }
        if groups is not None:
            tensor_parallel = dict(kwargs.get("tensor_parallel") or {})
            tensor_parallel["mpu"] = groups
            kwargs["tensor_parallel"] = tensor_parallel
        return kwargs


def _policy_names(names: str | tuple[str, ...]) -> tuple[str, ...]:
    """The layer names of a policy, plus ``.name`` for each direct child of the policy's module.

    DeepSpeed compares ``parent + "." + child`` with the policy, so a direct child ``l1`` of the module reaches it as
    ``".l1"`` and a policy saying ``"l1"`` (as in the user guide) would silently leave it unsliced.
    """
    given = (names,) if isinstance(names, str) else tuple(names)
    return given + tuple(f".{name}" for name in given if "." not in name)


class TensorParallelGroups:
    """Process groups of consecutive ranks for tensor-parallel inference (DeepSpeed's "mpu" protocol).

    DeepSpeed's own inference groups put ranks ``0..tp_size-1`` in one group and leave the others out, which only works
    when ``tp_size`` equals the world size. These groups cover every rank: ranks ``[0, tp)``, ``[tp, 2tp)``, ...
    Every rank must build them (``torch.distributed.new_group`` is collective).

    Args:
        tp_size: Ranks per tensor-parallel group.
    """

    def __init__(self, tp_size: int) -> None:
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        self.tp_size = tp_size
        self._rank = rank
        self._model_group: Any = None
        self._data_group: Any = None
        for start in range(0, world, tp_size):
            group = dist.new_group(list(range(start, start + tp_size)))
            if start <= rank < start + tp_size:
                self._model_group = group
        for offset in range(tp_size):
            group = dist.new_group(list(range(offset, world, tp_size)))
            if rank % tp_size == offset:
                self._data_group = group

    def get_model_parallel_group(self) -> Any:
        """This rank's tensor-parallel group."""
        return self._model_group

    def get_model_parallel_rank(self) -> int:
        """This rank's index inside its tensor-parallel group."""
        return self._rank % self.tp_size

    def get_model_parallel_world_size(self) -> int:
        """The tensor-parallel size."""
        return self.tp_size

    def get_data_parallel_group(self) -> Any:
        """The ranks that hold the same shard (one per tensor-parallel group)."""
        return self._data_group

    def get_data_parallel_rank(self) -> int:
        """Which tensor-parallel group this rank belongs to."""
        return self._rank // self.tp_size

    def get_data_parallel_world_size(self) -> int:
        """How many tensor-parallel groups there are."""
        import torch.distributed as dist

        return int(dist.get_world_size()) // self.tp_size
