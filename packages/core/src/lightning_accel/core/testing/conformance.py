"""Conformance tests every vendor accelerator must pass, on hardware or on its emulator."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch import Trainer
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry

from lightning_accel.core.errors import ConfigurationError
from lightning_accel.core.pycompat import strict_zip
from lightning_accel.core.testing.models import DigitsClassifier, DigitsDataModule

__all__ = ["AcceleratorConformance", "FabricConformance"]


def _registered_class(registry: dict[str, Any], name: str, key: str) -> type:
    entry = registry[name][key]
    load = getattr(entry, "load", None)
    return load() if load is not None else entry


class AcceleratorConformance:
    """Trainer-side conformance tests. Subclass as ``Test<Vendor>Conformance`` and set the class attributes.

    Attributes:
        accelerator: The registered accelerator name (``"hpu"``).
        single_strategy: The registered name of the single-device strategy.
        parallel_strategy: The registered name of the default multi-device strategy.
        min_accuracy: Validation accuracy the digits classifier must reach in ``fit_epochs`` epochs.
        fit_epochs: Epochs of the fit test.
        trainer_kwargs: Extra Trainer arguments the vendor needs (e.g. precision).
        memory_stat: The key of ``get_device_stats`` that counts the bytes tensors hold on the device (``"InUse"`` on
            Gaudi). ``None`` for a vendor whose devices report no memory from the host; the allocation test is then
            skipped with that reason, and only the shape of the statistics is checked.
    """

    accelerator: ClassVar[str]
    single_strategy: ClassVar[str]
    parallel_strategy: ClassVar[str]
    min_accuracy: ClassVar[float] = 0.85
    fit_epochs: ClassVar[int] = 4
    trainer_kwargs: ClassVar[dict[str, Any]] = {}
    #: The exception type the vendor raises for a bad argument value: the core's ConfigurationError unless the vendor
    #: has its own subclass of it.
    configuration_error: ClassVar[type[Exception]] = ConfigurationError
    memory_stat: ClassVar[str | None] = "InUse"

    def make_trainer(self, tmp_path: Path, **kwargs: Any) -> Trainer:
        """A quiet Trainer on the vendor accelerator; ``kwargs`` override the defaults."""
        options: dict[str, Any] = {
            "accelerator": self.accelerator,
            "devices": 1,
            "default_root_dir": str(tmp_path),
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            **self.trainer_kwargs,
        }
        options.update(kwargs)
        return Trainer(**options)

    def test_registered(self) -> None:
        assert self.accelerator in AcceleratorRegistry.available_accelerators()
        assert {self.single_strategy, self.parallel_strategy} <= set(StrategyRegistry.available_strategies())

    def test_string_selects_single_strategy(self, tmp_path: Path) -> None:
        trainer = self.make_trainer(tmp_path, devices=1)
        assert isinstance(trainer.accelerator, _registered_class(AcceleratorRegistry, self.accelerator, "accelerator"))
        assert type(trainer.strategy) is _registered_class(StrategyRegistry, self.single_strategy, "strategy")

    def test_string_selects_parallel_strategy(self, tmp_path: Path) -> None:
        trainer = self.make_trainer(tmp_path, devices=2)
        assert isinstance(trainer.strategy, _registered_class(StrategyRegistry, self.parallel_strategy, "strategy"))
        assert len(trainer.strategy.parallel_devices) == 2  # type: ignore[attr-defined]

    def test_instance_selects_single_strategy(self, tmp_path: Path) -> None:
        accelerator = _registered_class(AcceleratorRegistry, self.accelerator, "accelerator")()
        trainer = self.make_trainer(tmp_path, accelerator=accelerator, devices=1)
        assert trainer.accelerator is accelerator
        assert type(trainer.strategy) is _registered_class(StrategyRegistry, self.single_strategy, "strategy")

    def test_strategy_string(self, tmp_path: Path) -> None:
        trainer = self.make_trainer(tmp_path, strategy=self.single_strategy, devices=1)
        assert type(trainer.strategy) is _registered_class(StrategyRegistry, self.single_strategy, "strategy")

    def test_bad_devices_value_is_a_clear_error(self, tmp_path: Path) -> None:
        # The vendor's own error type: a bare ValueError from int("many") deep inside the parser does not pass.
        with pytest.raises(self.configuration_error) as info:
            self.make_trainer(tmp_path, devices="many")
        assert "devices='many'" in str(info.value), "the message must name the argument and the value"

    def test_fit_validate_test_predict(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        model, data = DigitsClassifier(), DigitsDataModule()
        trainer = self.make_trainer(tmp_path, max_epochs=self.fit_epochs, enable_checkpointing=False)
        trainer.fit(model, datamodule=data)
        accuracy = trainer.validate(model, datamodule=data)[0]["val_acc"]
        assert accuracy >= self.min_accuracy, f"validation accuracy {accuracy:.3f} < {self.min_accuracy}"
        assert trainer.test(model, datamodule=data)[0]["test_acc"] >= self.min_accuracy
        predictions = trainer.predict(model, datamodule=data)
        assert predictions is not None
        predicted = torch.cat([torch.as_tensor(batch).cpu() for batch in predictions])
        labels = data.val_set.tensors[1]
        assert predicted.shape == labels.shape, "predict must return one class per validation sample"
        predicted_accuracy = (predicted == labels).float().mean().item()
        assert predicted_accuracy >= self.min_accuracy, f"predictions are right for only {predicted_accuracy:.3f}"

    def test_checkpoint_round_trip(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        model, data = DigitsClassifier(), DigitsDataModule()
        trainer = self.make_trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
        trainer.fit(model, datamodule=data)
        path = tmp_path / "model.ckpt"
        trainer.save_checkpoint(path)
        restored = DigitsClassifier.load_from_checkpoint(path, map_location="cpu")
        for (name, saved), (_, original) in strict_zip(restored.state_dict().items(), model.state_dict().items()):
            assert torch.equal(saved.cpu(), original.cpu()), name
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        assert checkpoint["global_step"] == trainer.global_step > 0

    def test_device_stats_are_finite_numbers(self, tmp_path: Path) -> None:
        trainer = self.make_trainer(tmp_path)
        stats = trainer.accelerator.get_device_stats(trainer.strategy.root_device)
        assert stats, "get_device_stats returned nothing"
        assert all(isinstance(value, (int, float)) and math.isfinite(value) for value in stats.values()), stats
        if self.memory_stat is not None:
            assert self.memory_stat in stats, f"{self.memory_stat!r} missing from {sorted(stats)}"

    def test_device_stats_follow_an_allocation(self, tmp_path: Path) -> None:
        key = self.memory_stat
        if key is None:
            pytest.skip(f"{type(self).__name__} declares memory_stat = None: its devices report no memory")
        trainer = self.make_trainer(tmp_path)
        device = trainer.strategy.root_device

        def held() -> float:
            return float(trainer.accelerator.get_device_stats(device)[key])

        size = 64 * 1024 * 1024
        before = held()
        block = torch.ones(size, dtype=torch.uint8, device=device)  # written, so that every page is really held
        during = held()
        del block
        after = held()
        # Half the block is the margin for whatever else the process allocates or frees meanwhile.
        assert during - before >= size / 2, f"{key}: {before} -> {during} after allocating {size} bytes"
        assert during - after >= size / 2, f"{key}: {during} -> {after} after freeing {size} bytes"

    def test_pickle_for_spawn(self, tmp_path: Path) -> None:
        trainer = self.make_trainer(tmp_path)
        for obj in (trainer.accelerator, trainer.strategy.precision_plugin):
            assert type(pickle.loads(pickle.dumps(obj))) is type(obj)


class FabricConformance:
    """Fabric-side conformance tests. Subclass as ``Test<Vendor>FabricConformance``.

    Attributes:
        accelerator: The registered accelerator name.
        single_strategy: The registered name of the single-device Fabric strategy.
    """

    accelerator: ClassVar[str]
    single_strategy: ClassVar[str]

    def test_string_selects_single_strategy(self) -> None:
        from lightning.fabric.strategies import STRATEGY_REGISTRY

        fabric = Fabric(accelerator=self.accelerator, devices=1)
        assert type(fabric.strategy) is _registered_class(STRATEGY_REGISTRY, self.single_strategy, "strategy")

    def test_training_loop_reduces_loss(self) -> None:
        from lightning_accel.core.testing.models import digits_tensors

        torch.manual_seed(0)
        fabric = Fabric(accelerator=self.accelerator, devices=1)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
        model, optimizer = fabric.setup(model, optimizer)
        x, y, _, _ = digits_tensors()
        x, y = fabric.to_device(x), fabric.to_device(y)
        losses = []
        for _ in range(50):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < 0.5 * losses[0], losses
