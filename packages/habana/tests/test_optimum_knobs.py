"""optimum-habana's knobs on the (emulated) HPU: Dynamo settings, fwd/bwd pipelining, non-blocking copies, adjusted
throughput, sdp_on_bf16 and fused clipping from the precision string."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

import lightning_accel.habana  # noqa: F401  (registers the plugins)
from lightning_accel.core.errors import ConfigurationError
from lightning_accel.habana import sdk
from lightning_accel.habana.adjusted_throughput import AdjustedThroughputMonitor
from lightning_accel.habana.dynamo_settings import DynamoSettings, RecompileLimitWarning
from lightning_accel.habana.fused_clip import HPUFusedClipNorm
from lightning_accel.habana.lazy_steps import PipelineForwardBackward
from lightning_accel.habana.sdp_settings import SDPOnBF16

QUIET: dict[str, Any] = {
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "enable_checkpointing": False,
    "logger": False,
}


def _loader(n: int = 32, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 8, generator=generator), torch.randn(n, 1, generator=generator)), batch_size
    )


class _Regression(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# ------------------------------------------------------------------------------------------------------ Dynamo


def test_dynamo_settings_reach_dynamo_during_fit_are_restored_and_report_the_limit(eager_mode: None) -> None:
    import torch._dynamo.config as config

    before = (config.cache_size_limit, config.allow_unspec_int_on_nn_module)
    seen: list[tuple[int, bool]] = []

    @torch.compile(backend="eager", dynamic=False)
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Model(_Regression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append((config.cache_size_limit, config.allow_unspec_int_on_nn_module))
            scaled(torch.ones(batch_idx + 1, device=self.device))  # a new static shape each step: a recompile
            return super().training_step(batch, batch_idx)

    settings = DynamoSettings(cache_size_limit=2, allow_unspec_int_on_nn_module=True)
    trainer = Trainer(accelerator="hpu", devices=1, max_steps=4, callbacks=[settings], **QUIET)
    with pytest.warns(RecompileLimitWarning) as caught:
        trainer.fit(Model(), _loader())
    assert seen == [(2, True)] * 4
    assert (config.cache_size_limit, config.allow_unspec_int_on_nn_module) == before
    (hit,) = settings.limit_hits
    assert hit[0].startswith("'scaled' (") and hit[1] == "recompile_limit=2"
    (message,) = {str(w.message) for w in caught if w.category is RecompileLimitWarning}
    assert message.startswith(
        "DynamoSettings: Dynamo reached its recompile limit (recompile_limit=2) for function 'scaled'"
    )
    assert "Raise DynamoSettings(cache_size_limit=...)" in message


def test_dynamo_settings_as_a_context_manager_and_their_refusals() -> None:
    import torch._dynamo.config as config

    before = config.cache_size_limit
    with DynamoSettings(cache_size_limit=before + 5):
        assert config.cache_size_limit == config.recompile_limit == before + 5
    assert config.cache_size_limit == before
    with pytest.raises(ConfigurationError, match=r"DynamoSettings\(cache_size_limit=0\) is not accepted"):
        DynamoSettings(cache_size_limit=0)
    with pytest.raises(ConfigurationError, match=r"DynamoSettings\(inline_inbuilt_nn_modules='no'\)"):
        DynamoSettings(inline_inbuilt_nn_modules="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"DynamoSettings\(\) sets nothing"):
        DynamoSettings()


def test_a_retired_inline_setting_says_it_cannot_take_effect() -> None:
    import torch._dynamo.config as config

    retired = bool(getattr(config._config["inline_inbuilt_nn_modules"], "deprecated", False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with DynamoSettings(inline_inbuilt_nn_modules=False):
            pass
    said = [str(w.message) for w in caught if "cannot take effect" in str(w.message)]
    assert len(said) == int(retired)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]


# ------------------------------------------------------------------------------------------------------ pipelining


@pytest.mark.emulator_only
def test_pipelining_adds_a_step_mark_between_forward_and_backward(lazy_mode: None) -> None:
    from lightning_accel.habana_emulator import core as emulated_core  # the emulator's internals: its mark count

    marks_at_backward: list[int] = []

    class Model(_Regression):
        def on_before_backward(self, loss: torch.Tensor) -> None:
            # Lightning runs the callbacks' on_before_backward first, then the module's, then the backward pass.
            marks_at_backward.append(emulated_core._marked_steps())

    counts, seen = [], []
    for callbacks in ([], [PipelineForwardBackward()]):
        marks_at_backward.clear()
        trainer = Trainer(accelerator="hpu", devices=1, max_steps=3, callbacks=callbacks, **QUIET)
        before = emulated_core._marked_steps()
        trainer.fit(Model(), _loader())
        counts.append(emulated_core._marked_steps() - before)
        seen.append([m - before for m in marks_at_backward])
    # after backward + after the optimizer step; with pipelining also before backward.
    assert counts == [3 * 2, 3 * 3]
    # The forward pass is closed before each backward pass starts.
    assert seen == [[0, 2, 4], [1, 4, 7]]


def test_pipelining_refuses_eager_mode(eager_mode: None) -> None:
    trainer = Trainer(accelerator="hpu", devices=1, max_steps=1, callbacks=[PipelineForwardBackward()], **QUIET)
    with pytest.raises(ConfigurationError, match=r"PipelineForwardBackward .* needs the SDK's lazy mode"):
        trainer.fit(_Regression(), _loader())


# ------------------------------------------------------------------------------------------------------ data copy


def test_batches_reach_the_hpu_with_non_blocking_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[bool] = []
    original = torch.Tensor.to

    def spy(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        target = args[0] if args else kwargs.get("device")
        batch = self.device.type == "cpu" and self.dim() == 2 and self.shape[0] == 4  # not the parameters' moves
        if batch and isinstance(target, torch.device) and target.type == "hpu":
            copies.append(bool(kwargs.get("non_blocking", False)))
        return original(self, *args, **kwargs)

    class Blocking(_Regression):
        def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
            return [original(t, device) for t in batch]

    losses = []
    for module_class in (_Regression, Blocking):
        torch.manual_seed(0)
        model = module_class()
        monkeypatch.setattr(torch.Tensor, "to", spy)
        Trainer(accelerator="hpu", devices=1, max_steps=4, **QUIET).fit(model, _loader())
        monkeypatch.undo()
        losses.append(model.losses)
    assert copies == [True] * 8  # 4 batches of (x, y), every copy non-blocking
    assert losses[0] == losses[1]  # the same values as blocking copies


# ------------------------------------------------------------------------------------------------------ throughput


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _throughput_run(clock: _FakeClock, adjust: bool, tmp_path: Any) -> AdjustedThroughputMonitor:
    class Timed(_Regression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            clock.now += 1.0
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            clock.now += 100.0  # a slow validation

    class SlowSave(Callback):
        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            clock.now += 50.0  # a slow checkpoint write

    monitor = AdjustedThroughputMonitor(lambda batch: batch[0].shape[0], adjust=adjust, window_size=2, clock=clock)
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=6,
        val_check_interval=2,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        callbacks=[monitor, SlowSave()],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Timed(), _loader(), _loader(8))
    return monitor


def test_adjusted_throughput_leaves_out_a_slow_validation_and_checkpoint(tmp_path: Any) -> None:
    adjusted = _throughput_run(_FakeClock(), True, tmp_path / "a")
    assert adjusted.metrics["train|time"] == 6.0  # six training steps of one second
    assert adjusted.metrics["train|device|samples_per_sec"] == 4.0  # batches of 4, one per second
    assert adjusted.metrics["train|samples"] == 24
    assert adjusted.excluded > 0
    plain = _throughput_run(_FakeClock(), False, tmp_path / "b")
    # Without the adjustment, the validations after steps 2 and 4 (and the checkpoints after them) count.
    assert plain.metrics["train|time"] == 6.0 + 2 * (100.0 + 50.0)


# ------------------------------------------------------------------------------------------------------ sdp_on_bf16


def test_sdp_on_bf16_reaches_torch_for_the_run() -> None:
    seen: list[bool] = []

    class Model(_Regression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append(torch._C._get_math_sdp_allow_fp16_bf16_reduction())
            return super().training_step(batch, batch_idx)

    before = torch._C._get_math_sdp_allow_fp16_bf16_reduction()
    Trainer(accelerator="hpu", devices=1, max_steps=2, callbacks=[SDPOnBF16()], **QUIET).fit(Model(), _loader())
    assert seen == [True, True]
    assert torch._C._get_math_sdp_allow_fp16_bf16_reduction() == before is False
    with SDPOnBF16():
        assert torch._C._get_math_sdp_allow_fp16_bf16_reduction()
    assert not torch._C._get_math_sdp_allow_fp16_bf16_reduction()


# ------------------------------------------------------------------------------------------------------ fused clip


def test_fused_clip_norm_from_the_precision_string(monkeypatch: pytest.MonkeyPatch) -> None:
    fused = sdk.fused_normalization_module().FusedClipNorm
    calls: list[float] = []
    original = fused.clip_norm

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1.0)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(fused, "clip_norm", counting)
    for callbacks, expected in (([], 0), ([HPUFusedClipNorm()], 3)):
        calls.clear()
        trainer = Trainer(
            accelerator="hpu",
            devices=1,
            precision="bf16-mixed",
            gradient_clip_val=1.0,
            max_steps=3,
            callbacks=callbacks,
            **QUIET,
        )
        trainer.fit(_Regression(), _loader())
        assert len(calls) == expected
        assert trainer.precision_plugin.fused_clip_norm is False  # put back after the run


def test_fused_clip_norm_refuses_what_would_not_clip() -> None:
    trainer = Trainer(accelerator="hpu", devices=1, max_steps=1, callbacks=[HPUFusedClipNorm()], **QUIET)
    with pytest.raises(ConfigurationError, match=r"gradient_clip_val=None: nothing would be clipped"):
        trainer.fit(_Regression(), _loader())
    trainer = Trainer(
        accelerator="hpu",
        devices=1,
        max_steps=1,
        gradient_clip_val=1.0,
        gradient_clip_algorithm="value",
        callbacks=[HPUFusedClipNorm()],
        **QUIET,
    )
    with pytest.raises(ConfigurationError, match=r"gradient_clip_algorithm='value': the SDK's FusedClipNorm"):
        trainer.fit(_Regression(), _loader())


# ------------------------------------------------------------------------------------------ throughput warm-up


def test_throughput_warmup_steps_leave_the_first_optimizer_steps_out(eager_mode: None, tmp_path: Any) -> None:
    from lightning_accel.core.callbacks import ThroughputAfterWarmup
    from lightning_accel.habana.optimum import import_optimum_habana

    # 2 optimizer steps of 2 batches each: optimum-habana starts its clock after 4 batches.
    arguments = {
        "throughput_warmup_steps": 2,
        "gradient_accumulation_steps": 2,
        "use_lazy_mode": False,
        "save_strategy": "no",
        "report_to": "none",
        "output_dir": str(tmp_path),
    }
    with pytest.raises(ConfigurationError, match=r"throughput_warmup_steps > 0: pass trainer_kwargs\(batch_size_fn="):
        import_optimum_habana(None, arguments).trainer_kwargs()
    reported = {}
    for steps in (2, 3):
        run = import_optimum_habana(None, {**arguments, "max_steps": steps})
        kwargs = run.trainer_kwargs(batch_size_fn=lambda batch: batch[0].shape[0])
        (warmup,) = [c for c in kwargs["callbacks"] if isinstance(c, ThroughputAfterWarmup)]
        trainer = Trainer(**{**kwargs, "enable_progress_bar": False, "enable_model_summary": False})
        trainer.fit(_Regression(), _loader(n=32, batch_size=4))
        reported[steps] = sorted(warmup.metrics)
    # 2 steps are all warm-up (nothing to report); a third step is measured.
    assert reported == {2: [], 3: ["train_samples_per_second", "train_steps_per_second"]}


def test_throughput_warmup_steps_refuse_what_they_cannot_report() -> None:
    from lightning_accel.habana.optimum import import_optimum_habana

    with pytest.raises(ConfigurationError) as raised:
        import_optimum_habana(None, {"throughput_warmup_steps": 3, "adjust_throughput": True})
    assert str(raised.value).startswith(
        "training_args: throughput_warmup_steps with adjust_throughput=True is not supported yet (issue 46)"
    )
    with pytest.raises(ConfigurationError, match=r"throughput_warmup_steps=-1 is not accepted. Accepted: an int >= 0"):
        import_optimum_habana(None, {"throughput_warmup_steps": -1})


# ------------------------------------------------------------------------------------------ fp8 minimize_memory


def test_minimize_memory_reaches_the_fp8_layers(tmp_path: Any) -> None:
    from lightning_accel.habana.optimum import import_optimum_habana

    te = sdk.transformer_engine_module()
    flags = {}
    for minimize in (False, True):
        run = import_optimum_habana(None, {"fp8": True, "minimize_memory": minimize}, workdir=tmp_path)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        run.prepare_model(model)
        flags[minimize] = [m.minimize_memory for m in model.modules() if isinstance(m, te.Linear)]
    # The SDK's Linear reads the flag at each forward: True casts the fp8 weight again in backward.
    assert flags == {False: [False, False], True: [True, True]}


def test_minimize_memory_refuses_what_would_not_use_it(tmp_path: Any) -> None:
    from lightning_accel.habana.optimum import import_optimum_habana

    with pytest.raises(ConfigurationError, match=r"minimize_memory=True without fp8=True: it steers the SDK's fp8"):
        import_optimum_habana(None, {"minimize_memory": True})
    run = import_optimum_habana(None, {"fp8": True, "minimize_memory": True}, workdir=tmp_path)
    with pytest.raises(ConfigurationError, match=r"minimize_memory=True, but ReLU has no fp8 Linear layer"):
        run.prepare_model(torch.nn.ReLU())
