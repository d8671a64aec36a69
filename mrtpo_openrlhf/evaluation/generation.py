"""Generate responses for evaluation prompts: vLLM when it is installed and a GPU is there, else transformers.

Both backends apply the model's chat template to a single user turn (the training prompt format), decode greedily
by default, and return plain response text (special tokens skipped).

The model is loaded once per process (``Generator`` keeps it in ``_LOADED``): every benchmark of a run, and a later
run in the same process with the same model and settings, reuse it; a different model first releases the previous
one. On a GPU it runs there in bf16 (fp16 where the GPU has no bf16), on the CPU in training's dtype (bf16 where
the CPU has bf16 instructions, else fp32: ``cpu/dtype.py``), unless ``dtype`` asks.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

logger = logging.getLogger(__name__)

MODEL_ALIASES = ("smollm2",)
BACKENDS = ("auto", "vllm", "transformers")
DTYPES = ("auto", "bf16", "fp16", "fp32")
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # also vLLM's dtype names


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 1024
    batch_size: int = 8
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    backend: str = "auto"  # auto | vllm | transformers
    dtype: str = "auto"  # auto (bf16 on a GPU; on the CPU training's rule, cpu/dtype.py) | bf16 | fp16 | fp32


def _hub_download(repo_id: str) -> str:
    """The local snapshot of hub model ``repo_id`` (config, tokenizer, safetensors weights; ``*.bin`` only where
    the repo has no safetensors), downloaded or taken from the HF cache. One-line ValueError when it cannot be had."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    common = ["*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja", "*.py"]
    try:
        path = snapshot_download(repo_id, allow_patterns=[*common, "*.safetensors"])
        if not any(Path(path).glob("*.safetensors")):
            path = snapshot_download(repo_id, allow_patterns=[*common, "*.bin"])
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise ValueError(
            f"--model {repo_id}: not a local folder, and the Hugging Face Hub refuses it ({type(exc).__name__})"
        ) from None
    except LocalEntryNotFoundError as exc:
        cause = exc.__cause__ or exc.__context__
        why = f"{type(cause).__name__}: {str(cause).splitlines()[0]}" if cause else "offline mode (HF_HUB_OFFLINE)"
        raise ValueError(
            f"--model {repo_id}: not a local folder, not in the Hugging Face cache, and the Hub cannot be reached "
            f"({why}); give a model folder"
        ) from None
    return str(path)


def resolve_model(model: str) -> str:
    """``smollm2`` -> the converted SmolLM2-135M-Instruct folder; an existing folder as is; else a hub id
    (``org/name``), downloaded or taken from the HF cache. Raises FileNotFoundError / ValueError (one line)."""
    if model == "smollm2":
        from mrtpo_openrlhf.models import ensure_smollm2

        return str(ensure_smollm2())
    if Path(model).is_dir():
        return model
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model)
        hub_id = not model.startswith((".", "/", "~")) and not Path(model).exists()
    except HFValidationError:
        hub_id = False
    if not hub_id:
        raise FileNotFoundError(
            f"--model {model}: model folder not found (give an HF model folder, a hub id or one of {MODEL_ALIASES})"
        )
    return _hub_download(model)


def choose_backend(requested: str = "auto") -> str:
    """vLLM iff it is importable and ``torch.cuda.is_available()``; ``transformers`` otherwise."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be auto, vllm or transformers, got {requested!r}")
    if requested != "auto":
        return requested
    import torch

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "transformers"


def choose_device_dtype(requested_dtype: str = "auto") -> tuple[str, str]:
    """(device, dtype): ``("cuda", "bf16")`` when ``torch.cuda.is_available()`` (``"fp16"`` where the GPU has no
    bf16), else the CPU with training's dtype rule (``cpu.dtype.resolve``: bf16 where the CPU has bf16
    instructions, fp32 elsewhere; ``MRTPO_CPU_DTYPE`` forces one); a dtype other than ``auto`` is kept as asked."""
    if requested_dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {requested_dtype!r}")
    import torch

    if torch.cuda.is_available():
        auto = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "cuda", auto if requested_dtype == "auto" else requested_dtype
    if requested_dtype != "auto":
        return "cpu", requested_dtype
    from ..cpu.dtype import resolve

    return "cpu", resolve().dtype


def chat_prompts(tokenizer, prompts: Sequence[str]) -> list[str]:
    """Each prompt as one user turn through the tokenizer's chat template, ready for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; evaluation uses the training chat format")
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]


def _load_transformers(model_dir: str, device: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"  # decoder-only batching: pad on the left so generation continues the prompt
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, TORCH_DTYPES[dtype])).to(device)
    model.eval()
    return tokenizer, model


def _generate_transformers(engine: Any, device: str, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
    import torch

    tokenizer, model = engine
    texts = chat_prompts(tokenizer, prompts)
    torch.manual_seed(cfg.seed)
    sampling = (
        {"do_sample": False}
        if cfg.temperature <= 0
        else {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p}
    )
    # Longest prompts first: batches of similar length waste less padding; results are put back in order.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    outputs: list[str] = [""] * len(texts)
    with torch.inference_mode(), tqdm(total=len(texts), desc="generating (transformers)", unit="prompt") as bar:
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = enc.to(device)
            gen = model.generate(
                **enc, max_new_tokens=cfg.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
            )
            new_tokens = gen[:, enc["input_ids"].shape[1] :]
            for i, text in zip(idx, tokenizer.batch_decode(new_tokens, skip_special_tokens=True)):
                outputs[i] = text
            bar.update(len(idx))
    return outputs


def _load_vllm(model_dir: str, device: str, dtype: str, seed: int) -> Any:
    from transformers import AutoTokenizer
    from vllm import LLM

    return AutoTokenizer.from_pretrained(model_dir), LLM(model=model_dir, seed=seed, dtype=TORCH_DTYPES[dtype])


def _generate_vllm(engine: Any, device: str, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
    from vllm import SamplingParams

    tokenizer, llm = engine
    params = SamplingParams(
        temperature=cfg.temperature,
        top_p=cfg.top_p if cfg.temperature > 0 else 1.0,
        max_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
    )
    results = llm.generate(chat_prompts(tokenizer, prompts), params, use_tqdm=True)
    return [r.outputs[0].text for r in results]


# The one loaded engine of this process: (key, engine). A second vLLM LLM() in one process can run out of GPU
# memory, so a new key releases the old engine before loading.
_LOADED: dict[str, Any] = {}


def _release() -> None:
    if _LOADED:
        _LOADED.clear()
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class Generator:
    """Responses from one model for any number of prompt lists; the model is resolved at construction (so a bad
    ``--model`` fails before anything runs) and loaded on the first ``generate`` call, once per process."""

    def __init__(self, model: str, cfg: GenerationConfig = GenerationConfig()):
        self.cfg = cfg
        self.model = model
        self.model_dir = resolve_model(model)
        self.backend = choose_backend(cfg.backend)
        self.device, self.dtype = choose_device_dtype(cfg.dtype)

    def record(self) -> dict[str, Any]:
        """What ``summary.json`` records: the backend, device and dtype actually used, and the model folder."""
        return {"backend": self.backend, "device": self.device, "dtype": self.dtype, "model_path": self.model_dir}

    def _engine(self) -> Any:
        seed = self.cfg.seed if self.backend == "vllm" else None  # vLLM fixes its seed when the engine is built
        key = repr((self.backend, str(Path(self.model_dir).resolve()), self.device, self.dtype, seed))
        if key not in _LOADED:
            _release()
            logger.info("loading %s on %s in %s with %s", self.model_dir, self.device, self.dtype, self.backend)
            if self.backend == "vllm":
                _LOADED[key] = _load_vllm(self.model_dir, self.device, self.dtype, self.cfg.seed)
            else:
                _LOADED[key] = _load_transformers(self.model_dir, self.device, self.dtype)
        return _LOADED[key]

    def generate(self, prompts: Sequence[str]) -> list[str]:
        """Responses for ``prompts``, in order."""
        if not prompts:
            return []
        logger.info("generating %d responses with %s from %s", len(prompts), self.backend, self.model_dir)
        runner = _generate_vllm if self.backend == "vllm" else _generate_transformers
        return runner(self._engine(), self.device, prompts, self.cfg)


def generate(model: str, prompts: Sequence[str], cfg: GenerationConfig = GenerationConfig()) -> list[str]:
    """Responses for ``prompts`` (same order) from the model folder, hub id or alias ``model``."""
    return Generator(model, cfg).generate(prompts) if prompts else []
