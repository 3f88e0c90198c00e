"""``HPUProfiler``: Lightning's PyTorch profiler, recording HPU activity."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import PyTorchProfiler

from lightning_accel.core.errors import ConfigurationError, DeviceUnavailableError

from . import sdk

__all__ = ["HPUProfiler", "record_hpu_activity"]


def _activities() -> list[Any]:
    try:
        return sdk.profiler_activities()
    except DeviceUnavailableError as exc:
        # Without HPUs the profiler still works, on the CPU, as PyTorchProfiler does, and says so.
        from lightning.pytorch.utilities.rank_zero import rank_zero_warn
        from torch.profiler import ProfilerActivity

        rank_zero_warn(f"HPUProfiler records CPU activity only: no HPU can be used in this process. {exc}")
        return [ProfilerActivity.CPU]


def _current_activities(requested: list[Any] | None) -> list[Any]:
    """The activities as members of the ``ProfilerActivity`` in force now.

    The SDK replaces ``torch.profiler.ProfilerActivity`` (and ``profile``) with its own when it loads, and its
    ``profile`` recognises only its own members: values taken before the SDK loaded (a profiler built before the
    Trainer) would be dropped, HPU tracing with them. So the activities are looked up again, by name, when the
    profiler is created.
    """
    if requested is None:
        return _activities()
    import torch.profiler

    current = torch.profiler.ProfilerActivity
    resolved = []
    for activity in requested:
        name = getattr(activity, "name", str(activity))
        member = getattr(current, name, None)
        if member is None:
            known = ", ".join(sorted(m for m in dir(current) if m.isupper()))
            raise ConfigurationError(
                f"HPUProfiler(activities=[..., {activity!r}, ...]): {name!r} is not a torch.profiler.ProfilerActivity "
                f"of this process. Accepted: {known}."
            )
        resolved.append(member)
    return resolved


_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def _activity_name(activity: Any) -> str:
    return str(getattr(activity, "name", activity))


def record_hpu_activity(profiler: object) -> None:
    """Make Lightning's own ``PyTorchProfiler`` (``Trainer(profiler="pytorch")``) record HPU activity too.

    Lightning adds CUDA activity when CUDA is available and knows no other device; the HPU strategies call this as a
    run starts, before the profiler creates its ``torch.profiler.profile``, so the GPU setting gives HPU traces.
    Activities the user chose (``activities=``) and other profilers are left alone.
    """
    cls = type(profiler)
    lightning_class = cls.__name__ == "PyTorchProfiler" and cls.__module__.split(".")[0] in _LIGHTNING_PACKAGES
    if not lightning_class or getattr(profiler, "profiler", None) is not None:
        return
    kwargs: dict[str, Any] = profiler._profiler_kwargs  # type: ignore[attr-defined]
    activities = kwargs.get("activities")
    defaults = profiler._default_activities()  # type: ignore[attr-defined]
    # By name: the SDK may have swapped torch.profiler's activity enum since the profiler was built.
    if not activities or [_activity_name(a) for a in activities] != [_activity_name(a) for a in defaults]:
        return  # no Kineto (Lightning records nothing then), or activities the user chose
    resolved = _current_activities(list(activities))
    for activity in _activities():
        if activity not in resolved:
            resolved.append(activity)
    kwargs["activities"] = resolved


SDK_DEFAULT_PROFILE = "profile_api_light"
"""The ``HABANA_PROFILE`` the SDK sets when it loads and the variable is unset.

gaudi-pytorch-bridge 1.19.0, ``habana_frameworks/torch/core/__init__.py`` (``_enable_profiler_if_needed``, called
at the end of the module): ``if "HABANA_PROFILE" not in os.environ: os.environ["HABANA_PROFILE"] =
"profile_api_light"``. The SDK's TensorFlow loader says why (``library_loader.py``): "By default use Profiler API
instrumentation so that user can do profiling with TensorBoard". lightning-habana's ``HPUProfiler`` (1.5 and later,
``profiler.py``) accepted this value and an unset variable, and refused every other.
"""


def _warn_if_the_sdk_profiler_is_on() -> None:
    value = os.environ.get("HABANA_PROFILE", "")
    if value in ("", SDK_DEFAULT_PROFILE):
        return
    from lightning.pytorch.utilities.rank_zero import rank_zero_warn

    # Not an error: the SDK documents HABANA_PROFILE on its own ("1" or a template name of hl-prof-config turns on its
    # profiling subsystem, Intel Gaudi docs, Profiling > Runtime), and how that and a torch.profiler trace interact
    # has not been seen on hardware here. Saying so beats two tools silently sharing a run.
    if value == "0":
        rank_zero_warn(
            "HABANA_PROFILE='0' keeps the SDK from setting its default 'profile_api_light', the API instrumentation "
            "that profiling with TensorBoard relies on, so HPUProfiler's trace may lack HPU activity. Unset "
            "HABANA_PROFILE (the SDK then sets 'profile_api_light'), or set it to 'profile_api_light'."
        )
        return
    rank_zero_warn(
        f"HABANA_PROFILE={value!r} turns on the Intel Gaudi profiling subsystem (an .hltv trace set up with "
        "hl-prof-config) while HPUProfiler records a torch.profiler trace. Profile with one at a time: unset "
        "HABANA_PROFILE (the SDK then sets its default 'profile_api_light') for HPUProfiler's trace, or drop "
        "HPUProfiler for the .hltv trace."
    )


class HPUProfiler(PyTorchProfiler):
    """Profile PyTorch operators on HPUs and write traces that Chrome tracing and TensorBoard open.

    On Gaudi it records CPU and HPU activity; on the emulator, whose SDK has no HPU trace source, CPU activity. It is a
    :class:`~lightning.pytorch.profilers.PyTorchProfiler` with the same arguments:

    * default profiling: ``Trainer(profiler=HPUProfiler())`` writes a JSON trace per profiled stage into ``dirpath``
      (the Trainer's log directory by default);
    * distributed profiling: with ``filename="perf-logs"`` every rank writes its own trace and summary;
    * custom actions: ``with profiler.profile("my_action"):`` or ``profiler.start("my_action")`` /
      ``profiler.stop("my_action")`` appear by name in the trace.

    :meth:`summary` returns the operator table (sorted by total time). Timings are those of a synchronously measured
    run: use it to find where time goes, and the ``SimpleProfiler`` for end-to-end wall-clock time.

    Args:
        dirpath: Directory for traces and summaries.
        filename: Base name of the per-rank files.
        **kwargs: Any argument of ``PyTorchProfiler`` (``row_limit``, ``sort_by_key``, ``record_module_names``,
            ``schedule``, ``activities``, ...).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_accel.habana import HPUProfiler
        >>> profiler = HPUProfiler(filename="perf-logs")
        >>> trainer = Trainer(accelerator="hpu", devices=2, profiler=profiler)  # doctest: +SKIP
    """

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, **kwargs: Any) -> None:
        requested = kwargs.get("activities")
        self._requested_activities = None if requested is None else list(requested)
        # Checked after Lightning's __init__, which sets up what its __del__ reads: refused, the object is still
        # collected quietly.
        super().__init__(dirpath=dirpath, filename=filename, **kwargs)
        if dirpath is not None and os.path.exists(dirpath) and not os.path.isdir(dirpath):
            raise ConfigurationError(
                f"HPUProfiler(dirpath={str(dirpath)!r}) is a file. Accepted: a directory (created when missing), or "
                "None for the Trainer's log directory. Fix: pass a directory path, or move the file away."
            )

    def _create_profilers(self) -> None:
        # By now the accelerator has loaded the SDK, which may have swapped torch.profiler's activity enum.
        _warn_if_the_sdk_profiler_is_on()
        if self.profiler is None:
            self._profiler_kwargs["activities"] = _current_activities(self._requested_activities)
        super()._create_profilers()
