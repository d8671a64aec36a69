"""A pure-torch stand-in for the few ``flash_attn`` helpers OpenRLHF imports at module level.

``openrlhf/models/ring_attn_utils.py`` does ``from flash_attn.bert_padding import ...`` and
``from flash_attn.utils.distributed import all_gather`` unconditionally, so ``openrlhf.models`` (and with it
every Ray actor) cannot be imported without flash-attn, which has no CPU build. Those helpers are only
*called* with ``--ds.packing_samples``; they are implemented here in plain torch so that path is correct too.
``flash_attn.ops`` is deliberately absent: ``log_probs_from_logits`` then takes its pure-torch fallback.

Installed by the CPU layer only when no real ``flash_attn`` is importable (see ``patches.py``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Tuple

import torch

STUB_MODULES = ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed")


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows of ``tensor`` (N, ...) at ``indices`` (K,) -> (K, ...)."""
    return tensor[indices]


def unpad_input(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Drop padded positions, as flash_attn.bert_padding.unpad_input (2.7 signature).

    Args:
        hidden_states: (B, S, ...) values.
        attention_mask: (B, S), nonzero where a token is real.
    Returns:
        (values (nnz, ...), indices (nnz,) into the flattened B*S axis, cu_seqlens (B+1,) int32,
         max_seqlen_in_batch int, seqlens (B,) int32).
    """
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, max_seqlen, seqlens


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of unpad_input: (nnz, ...) values at ``indices`` -> (batch, seqlen, ...), zeros elsewhere."""
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out[indices] = hidden_states
    return out.view(batch, seqlen, *hidden_states.shape[1:])


def all_gather(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` along dim 0 (same shape on every rank)."""
    world = torch.distributed.get_world_size(group)
    parts = [torch.empty_like(tensor) for _ in range(world)]
    torch.distributed.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=0)


def _fill(module) -> None:
    name = module.__name__
    if name == "flash_attn":
        module.__version__ = "0.0.0+mrtpo-cpu-stub"
        module.__path__ = []  # a package, so its submodules resolve through the finder below
    elif name == "flash_attn.utils":
        module.__path__ = []
    elif name == "flash_attn.bert_padding":
        from einops import rearrange

        module.index_first_axis, module.unpad_input, module.pad_input = index_first_axis, unpad_input, pad_input
        module.rearrange = rearrange
    elif name == "flash_attn.utils.distributed":
        module.all_gather = all_gather


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module):
        _fill(module)


class StubFinder(importlib.abc.MetaPathFinder):
    """Serves exactly ``STUB_MODULES``; anything else under ``flash_attn`` (e.g. ``.ops``) stays missing."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in STUB_MODULES:
            return None
        is_package = fullname in ("flash_attn", "flash_attn.utils")
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=is_package)


def install() -> bool:
    """Put the stub finder on ``sys.meta_path`` (idempotent). Returns True when it was added now."""
    if any(isinstance(finder, StubFinder) for finder in sys.meta_path):
        return False
    sys.meta_path.append(StubFinder())  # last: a real flash_attn found by PathFinder always wins
    return True
