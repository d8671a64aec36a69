"""ZeRO-3 buffer sizes from the model (adapter/zero3_sizes.py), against hand values and DeepSpeed's own parser."""

import json

import pytest
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from openrlhf.utils.deepspeed.deepspeed_utils import get_eval_ds_config, get_train_ds_config

from mrtpo_openrlhf.adapter.zero3_sizes import (
    AUTO_SIZED_KEYS,
    fill_auto_sizes,
    model_hidden_size,
    size_strategy_buffers,
    zero3_sizes,
)


def test_upstream_leaves_the_sizes_auto_and_deepspeed_then_uses_its_large_defaults():
    # the contract the hook relies on, and the reason for it
    zero = get_train_ds_config(offload=False, stage=3)["zero_optimization"]
    assert all(zero[key] == "auto" for key in AUTO_SIZED_KEYS)
    parsed = DeepSpeedZeroConfig(**zero)
    assert parsed.reduce_bucket_size == 500_000_000
    assert parsed.prefetch_bucket_size == 50_000_000
    assert parsed.param_persistence_threshold == 100_000
    assert parsed.sub_group_size == 1_000_000_000  # one optimizer sub-group for any rank under 1e9 parameters
    eval_zero = get_eval_ds_config(offload=False, stage=3)["zero_optimization"]
    assert all(eval_zero[key] == "auto" for key in AUTO_SIZED_KEYS[1:3])
    assert "sub_group_size" not in eval_zero  # no optimizer in the eval config


def test_sizes_for_smollm2_hidden_576_by_hand():
    assert zero3_sizes(576) == {
        "reduce_bucket_size": 331_776,  # 576 * 576
        "stage3_prefetch_bucket_size": 298_598,  # int(0.9 * 331776) = int(298598.4)
        "stage3_param_persistence_threshold": 5_760,
        "sub_group_size": 10_616_832,  # 32 * 576 * 576
    }
    with pytest.raises(ValueError, match="positive"):
        zero3_sizes(0)


def test_filled_config_is_what_deepspeed_reads_and_set_values_are_kept():
    config = get_train_ds_config(offload=False, stage=3)
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 0  # e.g. MRTPO_CPU_ZERO3_PERSISTENCE=0
    parsed = DeepSpeedZeroConfig(**fill_auto_sizes(config, 576)["zero_optimization"])
    assert parsed.reduce_bucket_size == 331_776
    assert parsed.prefetch_bucket_size == 298_598
    assert parsed.param_persistence_threshold == 0
    assert parsed.sub_group_size == 10_616_832
    assert fill_auto_sizes({"train_batch_size": 8}, 576) == {"train_batch_size": 8}  # no ZeRO section: unchanged


def _model_dir(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_hook_fills_both_configs_of_one_strategy_from_the_checkpoint(tmp_path):
    model = _model_dir(tmp_path, {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})
    assert model_hidden_size(model) == 64

    class Strategy:  # the two methods the hook wraps, returning upstream's own configs
        def get_ds_train_config(self, optim_dict=None):
            return get_train_ds_config(offload=False, stage=3)

        def get_ds_eval_config(self, offload=False):
            return get_eval_ds_config(offload=offload, stage=3)

    strategy, other = Strategy(), Strategy()
    assert size_strategy_buffers(strategy, model) == 64
    assert strategy.get_ds_train_config()["zero_optimization"]["reduce_bucket_size"] == 4096
    assert strategy.get_ds_eval_config()["zero_optimization"]["stage3_param_persistence_threshold"] == 640
    assert other.get_ds_train_config()["zero_optimization"]["reduce_bucket_size"] == "auto"  # per instance


def test_the_hidden_size_is_read_through_the_config_class_attribute_map(tmp_path):
    model = _model_dir(tmp_path, {"model_type": "gpt2", "n_embd": 32, "n_head": 2})
    assert model_hidden_size(model) == 32  # GPT-2 names it n_embd
