"""Emulation of ``habana_frameworks.torch.dynamo.compile_backend.config``: the settings of ``hpu_backend``.

The contract (gaudi-pytorch-bridge 1.19.0, ``.../compile_backend/config.py``):

* one module-level setting per name below, read once when the module loads from its ``PT_HPU_*`` variable (booleans
  accept ``on/1/yes/true/y/t`` and ``off/0/no/false/n/f`` in any case; anything else fails the import with an
  ``AssertionError`` naming the variable, as the SDK's ``assert False`` does);
* the module is one of torch's config modules (``install_config_module``): ``config.patch(...)``,
  ``config.save_config()`` and the rest, and an unknown name is an ``AttributeError``
  (``"<module>.<name> does not exist"``);
* ``hpu_backend(gm, inputs, options={...})`` applies ``options`` with ``config.patch(options)`` for that
  compilation (``backends.py:52-70``), so a key that is not one of these settings fails the compilation;
* ``configuration_flags`` reads and writes the settings by key, kept for the SDK's older API.

On the emulator, which compiles with Inductor instead of Gaudi's graph compiler, the settings are read, validated and
patched exactly as on the SDK, and change nothing in the compiled code: they tune the Synapse graph compiler, whose
work the emulator does not do.
"""

# No `from __future__ import annotations`: torch's config module would take its feature object for a setting.
import os
import sys
from typing import Any

from torch.utils._config_module import install_config_module


def _get_bool_from_env(env_var: str, default: str) -> bool:
    value = os.getenv(env_var, default).lower()
    if value in ("on", "1", "yes", "true", "y", "t"):
        return True
    if value in ("off", "0", "no", "false", "n", "f"):
        return False
    raise AssertionError(f"Unrecognized boolean value in env config:\n\t{env_var}: {value}")


def _get_decomp_mode(env_var: str, default: str) -> str:
    value = os.getenv(env_var, default).lower()
    if value not in ("habana", "core_aten", "none"):
        raise AssertionError(
            f"Unrecognized string value in env config:\n\t{env_var}: {value}\n\t"
            'Recognized values: "habana", "core_aten", "none"\n'
        )
    return value


use_compiled_recipes = _get_bool_from_env("PT_HPU_COMPILE_USE_RECIPES", "1")
decomposition_mode = _get_decomp_mode("PT_HPU_COMPILE_DECOMPOSITION_MODE", "habana")
keep_input_mutations = _get_bool_from_env("PT_HPU_KEEP_INPUT_MUTATIONS", "1")
use_eager_fallback = _get_bool_from_env("PT_HPU_USE_EAGER_FALLBACK", "1")
use_graph_freezing = _get_bool_from_env("PT_HPU_COMPILE_GRAPH_FREEZE", "0")
discard_frozen_params = _get_bool_from_env("PT_HPU_COMPILE_DISCARD_FROZEN_PARAMS", "0")
remove_unnecessary_clones = _get_bool_from_env("PT_HPU_COMPILE_REMOVE_UNNECESSARY_CLONES", "1")
use_inplace_allreduce = _get_bool_from_env("PT_HPU_USE_INPLACE_COLLECTIVE", "1")
use_inplace_index_copy = _get_bool_from_env("PT_HPU_USE_INPLACE_INDEX_COPY", "1")
inference = _get_bool_from_env("PT_HPU_USE_INFERENCE_COMPILER", "1")
enable_sfg = _get_bool_from_env("PT_HPU_ENABLE_SFG", "0")
use_cpp_partitioner = _get_bool_from_env("PT_HPU_USE_CPP_PARTITIONER", "1")
enable_allreduce_graph_split = _get_bool_from_env("PT_HPU_ENABLE_ALLREDUCE_GRAPH_SPLIT", "1")
force_static_compile = _get_bool_from_env("PT_HPU_FORCE_STATIC_COMPILE", "0")
reinplace_add = _get_bool_from_env("PT_HPU_REINPLACE_ADD", "1")
reassign_full_copy = _get_bool_from_env("PT_HPU_REASSIGN_FULL_COPY", "1")
reassign_copy_ = _get_bool_from_env("PT_HPU_REASSIGN_COPY_", "1")
use_boxed_input = _get_bool_from_env("PT_HPU_USE_BOXED_INPUT", "1")

# Turns this module into one of torch's config modules (patch, save_config, ...), as the SDK's does.
install_config_module(sys.modules[__name__])


class DictLikeClass:
    """The settings by key (``configuration_flags["inference"]``), the SDK's older API over this module."""

    def __getitem__(self, key: str) -> Any:
        return getattr(sys.modules[__name__], key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(sys.modules[__name__], key, value)


configuration_flags = DictLikeClass()
