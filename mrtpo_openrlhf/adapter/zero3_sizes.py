"""ZeRO-3 buffer sizes from the model, where upstream leaves them "auto".

OpenRLHF's DeepSpeed configs set ``reduce_bucket_size``, ``stage3_prefetch_bucket_size``,
``stage3_param_persistence_threshold`` and ``sub_group_size`` to "auto", a value only Hugging Face's Trainer
integration resolves (the first three). DeepSpeed itself drops "auto" keys and falls back to sizes chosen for large
models: a reduce bucket of 5e8 elements, allocated whole as the gradient buffer on every rank (1 GB in bf16, 2 GB in
fp32, for a 135M model as for a 70B one). Here they get the Trainer integration's rule, from the hidden size h:
buckets of h^2 and 0.9 h^2 elements and a persistence threshold of 10 h.

``sub_group_size`` (the Trainer leaves it to DeepSpeed's 1e9) is how many elements of a rank's fp32 partition the
optimizer steps at a time: each sub-group's gradients are upcast to fp32 and AdamW's temporaries made for it alone.
With 1e9, a rank holding under a billion parameters steps everything at once, and the step briefly needs about
twice the fp32 partition again (1.2 GiB more at the SmolLM2 actor's peak). 32 h^2, about three transformer layers
(one holds about 12 h^2), bounds that to a few layers' worth; a parameter larger than that (the embedding) is a
sub-group of its own. Adam is elementwise, so the update is the same; only the number of optimizer calls changes.
On one rank the other numbers do not change either (the same gradients, in smaller buckets); on several ranks
reductions run in more, smaller calls, as every Trainer-based run does.
"""

from __future__ import annotations

from typing import Optional

AUTO_SIZED_KEYS = (
    "reduce_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "sub_group_size",
)


def zero3_sizes(hidden_size: int) -> dict:
    """The four sizes, in elements, for a model of hidden size ``hidden_size``."""
    if hidden_size <= 0:
        raise ValueError(f"hidden_size must be positive (got {hidden_size})")
    return {
        "reduce_bucket_size": hidden_size * hidden_size,
        "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
        "stage3_param_persistence_threshold": 10 * hidden_size,
        "sub_group_size": 32 * hidden_size * hidden_size,
    }


def fill_auto_sizes(config: dict, hidden_size: int) -> dict:
    """``config`` (a DeepSpeed config) with each of the four keys that is still "auto" set from the hidden size;
    values the user or another hook set are kept. Changes and returns ``config``."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return config
    for key, value in zero3_sizes(hidden_size).items():
        if zero.get(key) == "auto":
            zero[key] = value
    return config


def model_hidden_size(pretrain: str) -> Optional[int]:
    """The hidden size in ``pretrain``'s config (the text model's for a multimodal one), None if it has none."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(pretrain, trust_remote_code=True)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "hidden_size", None)
    return int(size) if isinstance(size, int) and size > 0 else None


def size_strategy_buffers(strategy, pretrain: str) -> Optional[int]:
    """Make this process's ``strategy`` fill the "auto" sizes of its train and eval configs from ``pretrain``'s
    hidden size (returned, after one line naming the sizes; None, and nothing changed, if the model has none)."""
    hidden = model_hidden_size(pretrain)
    if hidden is None:
        return None
    sizes = ", ".join(f"{k} {v}" for k, v in zero3_sizes(hidden).items())
    print(f"[mrtpo] ZeRO-3 buffers from hidden size {hidden}: {sizes}", flush=True)
    for name in ("get_ds_train_config", "get_ds_eval_config"):
        original = getattr(strategy, name)

        def sized(*args, _original=original, **kwargs):
            return fill_auto_sizes(_original(*args, **kwargs), hidden)

        setattr(strategy, name, sized)  # on the instance: each Ray actor holds its own copy of the strategy
    return hidden
