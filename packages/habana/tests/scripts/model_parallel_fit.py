"""Child script of the model-parallel tests: a small Llama or GPT-2 from transformers (configs in code) on HPUs.

``--layout single`` trains on one HPU without parallelism (the reference); ``fsdp`` shards it with FSDP2 over two
HPUs, ``tp`` splits its layers with tensor parallelism over two, ``2d`` does both on four (2 x 2). The FSDP2 layouts
run in bfloat16 through FSDP2's ``MixedPrecisionPolicy``. Every layout sees the same global batch of 8 sequences
per step. ``--save`` writes a distributed checkpoint after training; ``--resume`` validates that checkpoint and
trains on from it. ``--model gpt2`` takes GPT-2 (FSDP2 layouts only). Rank 0 writes what it saw to ``result.pt``.
Lightning's launcher re-runs this file for the other local processes, so it must work as a plain script.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

GLOBAL_BATCH = 8
SEQUENCE = 32
VOCAB = 128
REDUCE_OPS = ("sum", "mean", "max", "min")
LAYOUTS = {"single": (1, 1), "fsdp": (2, 1), "tp": (1, 2), "2d": (2, 2)}


def tokens(count: int, seed: int) -> torch.Tensor:
    # Arithmetic progressions modulo the vocabulary: a next token the model can learn from the two before it.
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (count, 1), generator=generator)
    step = torch.randint(1, 8, (count, 1), generator=generator)
    return (start + step * torch.arange(SEQUENCE)) % VOCAB


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQUENCE,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    # Made on the host from one seed in every layout: the single-HPU strategy would otherwise make it on the HPU,
    # whose generator draws other numbers.
    torch.manual_seed(0)
    with torch.device("cpu"):
        return LlamaForCausalLM(config)


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQUENCE, n_embd=64, n_layer=2, n_head=4)
    torch.manual_seed(0)
    with torch.device("cpu"):
        return GPT2LMHeadModel(config)


MODELS = {"llama": llama, "gpt2": gpt2}


def _blocks(model: torch.nn.Module) -> Any:
    # The repeated decoder blocks: Llama's layers, GPT-2's h.
    return model.model.layers if hasattr(model, "model") else model.transformer.h  # type: ignore[union-attr]


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The next-token cross entropy of ``tokens``."""
    logits = model(input_ids=tokens).logits.float()
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def parallelize(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """Tensor parallelism over the mesh's ``"tensor_parallel"`` dimension, then FSDP2 over ``"data_parallel"``."""
    if mesh["tensor_parallel"].size() > 1:
        _tensor_parallel(model, mesh["tensor_parallel"])
    if mesh["data_parallel"].size() > 1:
        _fully_shard(model, mesh["data_parallel"])
    return model


def _tensor_parallel(model: torch.nn.Module, mesh: Any) -> None:
    # The plan of torch's tensor-parallel tutorial: attention and MLP inputs split by column, outputs by row.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for layer in model.model.layers:  # type: ignore[union-attr]
        plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(),
        }
        parallelize_module(layer, mesh, plan)


def _fully_shard(model: torch.nn.Module, mesh: Any) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in _blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


class CausalLM(LightningModule):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.model: torch.nn.Module | None = None

    def configure_model(self) -> None:
        if self.model is not None:
            return
        model = MODELS[self.name]()
        self.model = model if self.device_mesh is None else parallelize(model, self.device_mesh)

    def _loss(self, batch: list[torch.Tensor]) -> torch.Tensor:
        assert self.model is not None
        return lm_loss(self.model, batch[0])

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), sync_dist=True)

    def _loader(self, tokens: torch.Tensor) -> DataLoader:
        # Rank r of the data-parallel dimension takes sequences r, r + size, ... in order, so that every layout's
        # global batch k holds the same 8 sequences (Lightning's own sampler would shuffle them in a distributed run).
        where = getattr(self.trainer.strategy, "distributed_sampler_kwargs", None) or {"num_replicas": 1, "rank": 0}
        dataset = TensorDataset(tokens)
        sampler = DistributedSampler(dataset, shuffle=False, **where)
        return DataLoader(dataset, batch_size=GLOBAL_BATCH // where["num_replicas"], sampler=sampler)

    def train_dataloader(self) -> DataLoader:
        return self._loader(tokens(64, seed=1))

    def val_dataloader(self) -> DataLoader:
        return self._loader(tokens(16, seed=2))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        assert self.model is not None
        return torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.0)


def _local_numel(module: torch.nn.Module) -> int:
    from torch.distributed.tensor import DTensor

    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in module.parameters())


class _Record(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.seen: dict[str, Any] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.seen["start_step"] = trainer.global_step
        state = trainer.optimizers[0].state.values()
        self.seen["start_optimizer_steps"] = sorted({float(s["step"]) for s in state if "step" in s})
        parameter = next(pl_module.parameters())
        self.seen["parameter"] = (type(parameter).__name__, parameter.device.type)
        self.seen["local_numel"] = _local_numel(pl_module)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        # The global batch's loss: the mean over the data-parallel ranks (tensor-parallel ranks hold the same value).
        loss = trainer.strategy.reduce(outputs["loss"].detach(), reduce_op="mean")
        self.losses.append(float(loss))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), required=True)
    # GPT-2's attention and MLP are transformers' Conv1D, which torch's ColwiseParallel/RowwiseParallel do not split.
    parser.add_argument("--model", choices=sorted(MODELS), default="llama")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--resume", type=Path)
    args = parser.parse_args()

    data_parallel, tensor_parallel = LAYOUTS[args.layout]
    devices = data_parallel * tensor_parallel
    strategy: Any = "auto"
    if devices > 1:
        from lightning.pytorch.strategies import ModelParallelStrategy

        # Lightning's own class, as a GPU script builds it: on HPUs it becomes HPUModelParallelStrategy.
        strategy = ModelParallelStrategy(data_parallel_size=data_parallel, tensor_parallel_size=tensor_parallel)
    record = _Record()
    trainer = Trainer(
        accelerator="hpu",
        devices=devices,
        strategy=strategy,
        max_steps=args.steps,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=args.out,
        callbacks=[record],
        use_distributed_sampler=False,
    )
    model = CausalLM(args.model)
    result: dict[str, Any] = {"strategy": type(trainer.strategy).__name__}
    if args.resume is not None:
        result["resumed_val_loss"] = trainer.validate(model, ckpt_path=args.resume, verbose=False)[0]["val_loss"]
    trainer.fit(model, ckpt_path=args.resume)
    result["val_loss"] = trainer.validate(model, verbose=False)[0]["val_loss"]
    if args.save is not None:
        trainer.save_checkpoint(args.save)
        result["saved_is_dir"] = args.save.is_dir()
    result.update(record.seen, losses=record.losses, end_step=trainer.global_step)
    if hasattr(trainer.strategy, "device_mesh") and devices > 1:
        mesh = trainer.strategy.device_mesh
        result["mesh"] = (mesh.device_type, tuple(mesh.shape), mesh.mesh_dim_names)
        result["backend"] = torch.distributed.get_backend()
        # A host tensor, as Lightning's own tests reduce it: HCCL serves HPU tensors only, so the strategy moves it.
        rank = trainer.global_rank
        result["host_reduce"] = {
            op: float(trainer.strategy.reduce(torch.tensor([rank + 1.0]), reduce_op=op)) for op in REDUCE_OPS
        }
    if trainer.global_rank == 0:
        torch.save(result, args.out / "result.pt")


if __name__ == "__main__":
    main()
