"""A software emulator of the Habana SDK (``habana_frameworks.torch``) for machines without Gaudi.

The distribution lightning-accel-habana-emulator (installed by ``lightning-accel-habana[emulator]``). The package
mirrors the SDK's module names so that, with emulation on, the SDK's names resolve to it in place of the real modules
(lightning-accel-habana's seam imports those names and never this package):

========================================  ==============================================
SDK module                                Emulator module
========================================  ==============================================
``habana_frameworks.torch``               ``lightning_accel.habana_emulator``
``habana_frameworks.torch.core``          ``lightning_accel.habana_emulator.core``
``habana_frameworks.torch.hpu``           ``lightning_accel.habana_emulator.hpu``
``habana_frameworks.torch.distributed``   ``lightning_accel.habana_emulator.distributed``
``...distributed.hccl``                   ``lightning_accel.habana_emulator.distributed.hccl``
``...utils.library_loader``               ``lightning_accel.habana_emulator.utils.library_loader``
``...utils.internal`` / ``.experimental``  ``lightning_accel.habana_emulator.utils.internal`` / ``.experimental``
``...core.step_closure``                  ``lightning_accel.habana_emulator.core.step_closure``
``...hpex``                               ``lightning_accel.habana_emulator.hpex``
``...experimental.transformer_engine``    ``..._emulator.hpex.experimental.transformer_engine``
``...dynamo.compile_backend``             ``lightning_accel.habana_emulator.dynamo.compile_backend``
========================================  ==============================================

With ``LIGHTNING_ACCEL_EMULATE=hpu`` the SDK's names resolve to these modules (the same module objects): this
distribution declares ``habana_frameworks.torch`` in the entry-point group ``lightning_accel.emulated_sdks.hpu`` and
lightning-accel-core's import aliases do the rest. ``torch.compile``'s ``hpu_backend`` is registered when
``dynamo.compile_backend`` is imported, as on the SDK; torch lists it before that through the entry points of
lightning-accel-habana.

Loading it loads the emulated HPU device (``lightning_accel.emulated_hpu``, a C++ device on c10's ``DeviceType::HPU``,
as the SDK loads its bridge; ``_native`` does it) and registers ``hpu`` as torch's device module: tensors made with
``device="hpu"`` are plain ``torch.Tensor`` objects on the HPU dispatch key, and their memory is host memory.
"""

from . import _load_effects, _torch_build

# As the SDK's first line (bcc5172 torch/__init__.py:20-21): no inductor compile process pool.
_load_effects.set_inductor_threads()
# Then, before anything else of the load (:39-54), the SDK checks the torch build it stands on: lazy mode is refused
# on upstream's CPU build. The build emulated is read once here (LIGHTNING_ACCEL_EMULATE_HPU_TORCH).
_torch_build.load_torch_build()
_torch_build.refuse_lazy_mode_on_upstream()

from . import (  # noqa: E402, F401
    _autocast,
    _custom_ops,
    _fp8_ops,
    _generation,
    _not_emulated,
    core,
    dynamo,
    hpex,
    hpu,
    hw_utilization_metric,  # the SDK imports it at load (bcc5172 __init__.py:77)
    utils,
)
from .distributed import hccl as _hccl  # noqa: E402,F401  (the SDK's __init__.py:75 imports it: its load effects)
from .utils.internal import is_lazy  # noqa: E402

# The SDK modules the emulator does not provide refuse by name, with the reason (not a bare ModuleNotFoundError).
_not_emulated.install_finder()

# The generation is read once, as the SDK learns it from the card when it loads; a bad value fails the load.
_generation.load_generation()
# As the SDK's import loads its bridge and registers its hpu module as torch.hpu (core/__init__.py:46), loading the
# emulated SDK loads the C++ HPU device and registers the emulated hpu module; then the SDK's own operators
# (torch.ops.hpu.*).
from . import _cpu_fallback, _lazy_graphs, _native  # noqa: E402

_native.install(hpu, core.is_lazy())
_lazy_graphs.install(core.is_lazy())
# The bridge sends operators it has no kernel for to the host, counted (and refused under PT_HPU_PLACE_ON_CPU).
_cpu_fallback.install()
_custom_ops.register(core.is_lazy())
# And, as the SDK's library does when it loads, reads the autocast lists once and registers the autocast kernels.
_autocast.install()

# The SDK's own reading of the torch build it stands on (bcc5172 __init__.py:39-45): the emulated build's.
is_torch_fork = _torch_build.torch_build() == "intel"
is_upstream_cpu = _torch_build.torch_build() == "upstream"

_not_emulated.provide(globals(), "habana_frameworks.torch")

# The SDK's last statement: the version module its wheel build writes (bound over the submodule, as there).
from .version import __version__ as __version__  # noqa: E402
from .version import version as version  # noqa: E402

__all__ = ["core", "dynamo", "hpex", "hpu", "hw_utilization_metric", "is_lazy", "utils"]
