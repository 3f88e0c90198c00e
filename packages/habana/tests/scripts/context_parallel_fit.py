"""Child script of test_context_parallel.py: a tiny Llama trained with context parallelism on emulated HPUs.

Every run reads the same batches in the same order (no shuffling) from the same starting weights, so the per-step
losses of ``--cp 2`` on two processes must equal those of ``--cp 1`` on one. Lightning's launcher re-runs this file
once per extra local process, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import transformers
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader

from lightning_accel.habana import HPUAccelerator, HPUContextParallelStrategy


class _NoAttention(torch.nn.Module):
    # A token-wise model with no config to inspect: only its first step can show that no attention was split.
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(96, 32), torch.nn.Linear(32, 96)

    def forward(self, input_ids: torch.Tensor, **_: Any) -> Any:
        return transformers.modeling_outputs.CausalLMOutput(logits=self.head(self.embed(input_ids)))


class CausalLM(LightningModule):
    def __init__(self, attention: str, model_loss: bool, split: bool) -> None:
        super().__init__()
        self.model_loss, self.split = model_loss, split
        config = transformers.LlamaConfig(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        config._attn_implementation = attention
        self.model = transformers.LlamaForCausalLM(config) if attention != "none" else _NoAttention()
        self.losses: list[float] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        cp = self.trainer.strategy.context_parallel  # type: ignore[attr-defined]
        if not self.split:  # wrong on purpose: the whole sequence on every rank
            return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"], use_cache=False).loss
        inputs, labels = cp.split(batch["input_ids"])
        if self.model_loss:  # wrong on purpose: transformers' loss over this rank's slice alone
            return self.model(**inputs, labels=inputs["input_ids"], use_cache=False).loss
        loss = cp.loss(self.model(**inputs, use_cache=False).logits, labels)
        if cp.size == 1:
            # The unsplit reference is transformers' own causal-LM loss.
            own = self.model(input_ids=batch["input_ids"], labels=batch["input_ids"], use_cache=False).loss
            torch.testing.assert_close(loss, own)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cp", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--attention", default="sdpa")
    parser.add_argument("--model-loss", action="store_true")
    parser.add_argument("--no-split", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--fused-sdpa", action="store_true")
    args = parser.parse_args()
    seed_everything(7)
    tokens = torch.randint(0, 96, (12, args.length), generator=torch.Generator().manual_seed(3))
    data = DataLoader([{"input_ids": row} for row in tokens], batch_size=4, shuffle=False)
    trainer = Trainer(
        accelerator=HPUAccelerator(),
        strategy=HPUContextParallelStrategy(
            context_parallel_size=args.cp, parallel_devices=[torch.device("hpu")] * args.devices
        ),
        devices=args.devices,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # Built after the Trainer: a transformers model built first leaves lazy mode's barrier without a device.
    module = CausalLM(args.attention, args.model_loss, not args.no_split)
    fused_calls = [0]
    if args.fused_sdpa:  # optimum-habana's attn_implementation="gaudi_fused_sdpa"
        from lightning_accel.habana import fused, use_fused_sdpa

        use_fused_sdpa(module.model, recompute=False, causal=True)
        kernel = fused._apply

        def counted(*call: Any, **options: Any) -> torch.Tensor:  # the SDK's kernel really ran
            fused_calls[0] += 1
            return kernel(*call, **options)

        fused._apply = counted
    if args.compile:  # refused: under compile transformers gives attention an explicit mask
        module.model.compile(backend="hpu_backend")
    trainer.fit(module, data)
    cp = trainer.strategy.context_parallel  # type: ignore[attr-defined]
    torch.save(
        {
            "losses": module.losses,
            "routed_calls": cp.routed_calls,
            "fused_calls": fused_calls[0],
            "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        },
        args.out / f"rank{trainer.global_rank}.pt",
    )


if __name__ == "__main__":
    main()
