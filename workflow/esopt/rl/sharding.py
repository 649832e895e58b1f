"""The RL baselines over several ranks: parameters, gradients and AdamW state sharded by FSDP2.

Why FSDP2 (`torch.distributed.fsdp.fully_shard`) and not accelerate's wrapper of the same
call: `accelerate.Accelerator` owns the process group and device placement as a
process-wide singleton, while this package already starts the group for ES
(esopt.es.distributed.from_env) and places each rank's model itself; fully_shard is the
maintained API underneath accelerate's FSDP2 plugin, without that layer.

What each rank does in one step (esopt.rl.trainer):

- rollouts: every FSDP unit is unsharded and kept so for the rollouts (`full_params`,
  the FSDP2 analogue of FSDP1's summon_full_params), so each rank generates its share of
  the episodes with the full parameters and no collective per forward (ranks may run
  different numbers of forwards);
- the episodes of all ranks are gathered, so every rank builds the same global batch,
  advantages and mini-batches;
- each rank runs forward/backward on its rows of each mini-batch, its loss being its
  share of the GLOBAL weighted token mean (weight / global weight sum), times the number
  of ranks, which FSDP's average of the gradients over ranks cancels: the update is the
  one-rank update on the whole batch. Every rank runs the same number of micro-batches (a rank short of rows
  runs one with weight 0), because each forward and backward is a collective.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from esopt.rl.losses import token_logprobs


class TokenScorer(torch.nn.Module):
    """token_logprobs of `model` as a module's forward: the FSDP root that owns the parameters
    outside the decoder layers (embeddings, final norm, output head), so that a forward
    through it gathers them."""

    def __init__(self, model: torch.nn.Module, chunk: int | None = None):
        super().__init__()
        self.model = model
        self.chunk = chunk

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        return token_logprobs(self.model, input_ids, attention_mask, temperature, self.chunk)


def layer_types(model: torch.nn.Module) -> set[str]:
    """Class names of the blocks each sharded as one FSDP unit: the decoder layers a
    Hugging Face model lists in `_no_split_modules`, on any of its submodules."""
    names: set[str] = set()
    for m in model.modules():
        names |= set(getattr(m, "_no_split_modules", None) or ())
    return names


def shard(root: torch.nn.Module, inner: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """fully_shard each decoder layer of `inner`, then `root` (which holds the rest), over all
    ranks of the default process group. FSDP averages the ranks' gradients: a loss that is a
    rank's share of a global mean is multiplied by the world size (`GRAD_SCALE`) to sum them
    (FSDP2's divide factor would do it with NCCL's PREMUL_SUM, which gloo lacks)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    names = layer_types(inner)
    if not names:
        raise ValueError(f"{type(inner).__name__} names no decoder layers (_no_split_modules); cannot shard it")
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    for m in list(inner.modules()):
        if type(m).__name__ in names:
            fully_shard(m, mesh=mesh)
    fully_shard(root, mesh=mesh)
    return root


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Hugging Face activation (gradient) checkpointing of every decoder layer, non-reentrant
    (the variant that works under FSDP): activations recomputed in backward."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name is deprecated)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def reshard(root: torch.nn.Module) -> None:
    """Every FSDP unit under `root` back to its shards (module.parameters() are the shards again)."""
    from torch.distributed.fsdp import FSDPModule

    for m in root.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


@contextlib.contextmanager
def full_params(root: torch.nn.Module) -> Iterator[None]:
    """Every FSDP unit under `root` unsharded (full parameters on each rank) and kept so
    through any number of forwards; resharded on exit. A no-op for an unsharded module."""
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in root.modules() if isinstance(m, FSDPModule)]
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in mods:
            m.reshard()
            # the root keeps its parameters from forward to backward (FSDP2's default for it)
            m.set_reshard_after_forward(m is not root, recurse=False)


def full_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's state dict with every sharded tensor gathered, on rank 0's CPU (a
    collective; the other ranks get an empty dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def state_dicts(module: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Full (unsharded) model and optimizer state dicts, keyed by parameter name (collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(module, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_state_dicts(module: torch.nn.Module, opt: torch.optim.Optimizer, model_sd: dict, opt_sd: dict) -> None:
    """Load full state dicts written by `state_dicts` into the sharded module and optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(module, opt, model_state_dict=model_sd, optim_state_dict=opt_sd,
                   options=StateDictOptions(full_state_dict=True))


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum float64 values over ranks."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.tolist()


def lockstep_rows(n: int, rank: int, world: int, chunk: int) -> list[torch.Tensor]:
    """This rank's rows (rank, rank + world, ...) of n, in chunks of at most `chunk`; as
    many chunks on every rank (an empty chunk where a rank has run out of rows), because
    each forward through a sharded model is a collective."""
    mine = torch.arange(rank, n, world)
    calls = math.ceil(math.ceil(n / world) / chunk) if n else 0
    return [mine[i * chunk:(i + 1) * chunk] for i in range(calls)]


def gathered_map(fn: Callable[[torch.Tensor], torch.Tensor], n: int, width: int, rank: int, world: int, chunk: int,
                 gather: Callable[[Any], list[Any]]) -> torch.Tensor:
    """fn(rows) -> [len(rows), width] over all n rows, each rank computing its rows in
    lockstep (an empty call runs fn on row 0 and drops the result), then all-gathered into
    one [n, width] tensor on every rank."""
    out = torch.zeros(n, width)
    mine = []
    for rows in lockstep_rows(n, rank, world, chunk):
        got = fn(rows if rows.numel() else torch.tensor([0]))
        if rows.numel():
            mine.append((rows, got.detach().float().cpu()))
    for part in gather(mine):
        for rows, vals in part:
            out[rows, : vals.shape[1]] = vals
    return out
