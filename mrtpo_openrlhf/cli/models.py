"""CLI: ``python -m mrtpo_openrlhf.models smollm2 [--cache-dir D]`` | ``tiny --out DIR [--arch qwen2|llama]``.

Prints the folder path on stdout (progress goes to stderr), so scripts can do MODEL=$(python -m ...).
"""

import argparse

from ..models.prepare import ensure_smollm2, make_tiny_model


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    smol = sub.add_parser("smollm2", help="convert the embedded SmolLM2-135M-Instruct GGUF once (cached)")
    smol.add_argument("--cache-dir", default=None, help="default: $MRTPO_CACHE/models")
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
        print(ensure_smollm2(args.cache_dir))
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
