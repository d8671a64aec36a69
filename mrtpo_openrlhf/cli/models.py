"""CLI: ``python -m mrtpo_openrlhf.models smollm2 [--cache-dir D]`` | ``tiny --out DIR [--arch qwen2|llama]``.

Prints the folder path on stdout (progress goes to stderr), so scripts can do MODEL=$(python -m ...).
"""

import argparse
import sys

from ..models.prepare import ensure_smollm2, make_tiny_model


def warm_js_kernel(dtype: str, temperature: float, vocab: int = 49152) -> None:
    """Run ``core.js_relevance`` once, compiled, on random logits like a replay's: its first compile (a C++ build,
    cc1plus about 1.9 GiB) then lands in torch.compile's cache here, not beside a training run's peak."""
    import torch

    from ..core.relevance import js_relevance

    g = torch.Generator().manual_seed(0)
    kind = torch.bfloat16 if dtype == "bf16" else torch.float32
    full, minus = (torch.randn(3, vocab, generator=g).to(kind) for _ in range(2))
    js_relevance(full, minus, temperature=temperature, kernel="compiled")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    smol = sub.add_parser("smollm2", help="convert the embedded SmolLM2-135M-Instruct GGUF once (cached)")
    smol.add_argument("--cache-dir", default=None, help="default: $MRTPO_CACHE/models")
    smol.add_argument(
        "--warm-js-kernel",
        choices=("bf16", "fp32"),
        default=None,
        help="also compile the replay's JS kernel once for logits of this dtype (torch.compile's cache)",
    )
    smol.add_argument("--temperature", type=float, default=1.0, help="the run's sampling temperature (with --warm)")
    tiny = sub.add_parser("tiny", help="a seeded random tiny model with the SmolLM2 tokenizer")
    tiny.add_argument("--out", required=True)
    tiny.add_argument("--arch", default="qwen2", choices=["qwen2", "llama"])
    tiny.add_argument("--hidden-size", type=int, default=128)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--untied", action="store_true", help="separate lm_head (default: tied to the embedding)")
    tiny.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    if args.command == "smollm2":
        path = ensure_smollm2(args.cache_dir)
        if args.warm_js_kernel:
            try:
                warm_js_kernel(args.warm_js_kernel, args.temperature)
            except Exception as exc:  # noqa: BLE001 - only a head start: the run compiles (or runs eagerly) itself
                print(f"[mrtpo.models] JS kernel not compiled ahead ({type(exc).__name__}: {exc})", file=sys.stderr)
        print(path)
    else:
        print(
            make_tiny_model(
                args.out,
                arch=args.arch,
                hidden_size=args.hidden_size,
                num_layers=args.layers,
                seed=args.seed,
                tie_word_embeddings=not args.untied,
                cache_dir=args.cache_dir,
            )
        )


if __name__ == "__main__":
    main()
