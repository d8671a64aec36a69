"""A gloo process group for the DeepSpeed-rank-0 -> vLLM weight sync, with PyNccl's ``broadcast`` interface.

Upstream ``stateless_init_process_group`` returns a ``PyNcclCommunicator``. On a machine without CUDA that
communicator disables itself and its ``broadcast`` returns without sending anything, so vLLM keeps sampling
from whatever its buffers held (silent: the run exits 0). This group really moves the bytes over TCP.
"""

from __future__ import annotations

import torch


class GlooWeightSyncGroup:
    """Stateless gloo group between trainer rank 0 (rank 0 here) and every vLLM worker.

    Built on vLLM's ``stateless_init_torch_distributed_process_group`` so it does not touch the default
    torch.distributed group of either side (DeepSpeed's or vLLM's).
    """

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int) -> None:
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        self.rank = rank
        self.world_size = world_size
        self.group = stateless_init_torch_distributed_process_group(
            master_address, master_port, rank, world_size, backend="gloo"
        )

    def broadcast(self, tensor: torch.Tensor, src: int = 0, stream=None) -> None:
        """Broadcast ``tensor`` in place from group rank ``src`` (``stream`` is accepted and ignored).

        Gloo needs a contiguous CPU tensor; a non-contiguous one is sent through a contiguous copy and
        the received values are written back, so callers may pass any view (e.g. ``param.data``).
        """
        if tensor.device.type != "cpu":
            raise ValueError(f"gloo weight sync needs CPU tensors, got device {tensor.device}")
        buffer = tensor if tensor.is_contiguous() else tensor.contiguous()
        self.group.broadcast(buffer, src).wait()
        if buffer is not tensor:
            tensor.copy_(buffer)

    def close(self) -> None:
        """Wait for every rank, then stop gloo's threads.

        A process that exits with the group still open can abort in gloo's destructor ("terminate called
        without an active exception") while its pair threads are still up.
        """
        self.group.barrier().wait()
        self.group.shutdown()


def make_gloo_weight_sync_group(master_address, master_port, rank, world_size, device=None) -> GlooWeightSyncGroup:
    """Drop-in for ``openrlhf.utils.distributed_util.stateless_init_process_group`` (``device`` is unused)."""
    return GlooWeightSyncGroup(master_address, int(master_port), int(rank), int(world_size))
