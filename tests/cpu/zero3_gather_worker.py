"""One rank of tests/cpu/test_zero3_gather.py: a load into a ZeRO-3 parameter under GatheredParameters.

Collectives are made *late* the way gloo can make them: an async all-gather writes its output only when its own
handle is waited or when a later blocking collective or broadcast starts, whichever comes first (a gloo worker
thread finishing it then). Rank 0 loads known values into a gathered Linear (weight and bias: the coalesced
gather), as transformers does under ``zero.Init``; the rank then prints what a fresh gather of each parameter holds.
"""

import json
import os

import deepspeed
import gloo_ranks
import torch
from deepspeed.runtime.zero import partition_parameters

from mrtpo_openrlhf.cpu import patches

_pending = []  # callables that finish a late all-gather


def _finish_pending():
    while _pending:
        _pending.pop(0)()


def _late(collective):
    def run(output, *args, async_op=False, **kwargs):
        if not async_op:
            _finish_pending()
            return collective(output, *args, async_op=False, **kwargs)
        scratch = [t.clone() for t in output] if isinstance(output, list) else output.clone()
        collective(scratch, *args, async_op=False, **kwargs)
        if isinstance(output, list):
            done = lambda: [o.copy_(s) for o, s in zip(output, scratch)]  # noqa: E731
        else:
            done = lambda: output.copy_(scratch)  # noqa: E731
        _pending.append(done)

        class Handle:
            def wait(self):
                if done in _pending:
                    _pending.remove(done)
                    done()

        return Handle()

    return run


def _finishing_first(collective):
    def run(*args, **kwargs):
        _finish_pending()
        return collective(*args, **kwargs)

    return run


def main(patched: bool) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    if patched:
        patches.apply()
    comm = partition_parameters.dist
    for name in ("all_gather", "all_gather_into_tensor"):
        setattr(comm, name, _late(getattr(comm, name)))
    comm.broadcast = _finishing_first(comm.broadcast)
    rank = torch.distributed.get_rank()
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    with deepspeed.zero.Init(config_dict_or_path=config):
        layer = torch.nn.Linear(64, 32)
    params = list(layer.parameters())
    loaded = [torch.arange(p.ds_numel, dtype=torch.float32).reshape(p.ds_shape) + 1 for p in params]
    if torch.distributed.get_world_size() == 1:
        # one rank: nothing is gathered and each parameter aliases its partition, so an in-place write without a
        # modifier rank stays (upstream's EMA update under ZeRO-3 relies on it)
        with deepspeed.zero.GatheredParameters(params):
            with torch.no_grad():
                for param, values in zip(params, loaded):
                    param.copy_(values)
    with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
        if rank == 0 and torch.distributed.get_world_size() > 1:
            with torch.no_grad():
                for param, values in zip(params, loaded):
                    param.copy_(values)
    right = []
    for param, values in zip(params, loaded):
        with deepspeed.zero.GatheredParameters([param]):
            right.append(bool(torch.equal(param.data, values)))
    partitioned = all(p.ds_tensor.numel() < p.ds_numel for p in params) or torch.distributed.get_world_size() == 1
    print(json.dumps({"rank": rank, "patched": patched, "partitioned": partitioned, "right": right}), flush=True)


if __name__ == "__main__":
    main(patched=os.environ.get("PATCHED") == "1")
    gloo_ranks.end_rank()
