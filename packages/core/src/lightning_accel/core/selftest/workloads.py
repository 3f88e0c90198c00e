"""Small, vendor-neutral training workloads for self-test checks: generated data (nothing downloaded), a classifier.

Imports torch and Lightning when called, never at import time.

Example:
    >>> from lightning_accel.core.selftest.workloads import blobs
    >>> features, labels = blobs(samples=64)
    >>> tuple(features.shape), int(labels.max()) < 4
    ((64, 16), True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

__all__ = ["FEATURES", "CLASSES", "accuracy", "blobs", "classifier", "loader"]

FEATURES = 16
CLASSES = 4


def blobs(samples: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian clusters, one per class, far enough apart that a small network separates them (> 95%).

    The clusters are always the same; ``seed`` draws the samples.
    """
    import torch

    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234)) * 2.0
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    features = centres[labels] + torch.randn(samples, FEATURES, generator=generator)
    return features, labels


def loader(samples: int = 512, batch_size: int = 32, seed: int = 0, shuffle: bool = False) -> DataLoader[Any]:
    """A loader over :func:`blobs` (no shuffling by default: every rank and every run sees the same batches)."""
    from torch.utils.data import DataLoader, TensorDataset

    features, labels = blobs(samples, seed)
    return DataLoader(TensorDataset(features, labels), batch_size=batch_size, shuffle=shuffle, drop_last=True)


def classifier(lr: float = 0.05, hidden: int = 32, log: bool = True) -> Any:
    """A two-layer classifier as a LightningModule, trained with SGD on cross-entropy; logs ``train_loss``.

    ``log=False`` for ``torch.compile``: TorchDynamo cannot trace ``self.log`` (torch 2.13, Lightning 2.6).
    """
    import torch
    import torch.nn.functional as F
    from lightning.pytorch import LightningModule

    class Classifier(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            if log:
                self.log("train_loss", loss)
            return loss

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0]).argmax(dim=1)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=lr, momentum=0.9)

    return Classifier()


def accuracy(module: Any, samples: int = 512, seed: int = 1) -> float:
    """Accuracy of ``module`` (features to logits) on samples it was not trained on, computed where it lives."""
    import torch

    features, labels = blobs(samples, seed)
    device = next(module.parameters()).device
    with torch.no_grad():
        predictions = module(features.to(device)).argmax(dim=1).to("cpu")
    return float((predictions == labels).float().mean())
