# Sourced by scripts: keep every cache inside the project (.cache/), never in ~.
_MRTPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export MRTPO_CACHE="${MRTPO_CACHE:-$_MRTPO_ROOT/.cache}"
export HF_HOME="$MRTPO_CACHE/hf" TORCH_EXTENSIONS_DIR="$MRTPO_CACHE/torch_extensions"
export VLLM_CACHE_ROOT="$MRTPO_CACHE/vllm" NLTK_DATA="$MRTPO_CACHE/nltk_data"
export TRITON_CACHE_DIR="$MRTPO_CACHE/triton" XDG_CACHE_HOME="$MRTPO_CACHE/xdg" TORCHINDUCTOR_CACHE_DIR="$MRTPO_CACHE/inductor"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}"
export TOKENIZERS_PARALLELISM=false DS_BUILD_OPS=0
mkdir -p "$MRTPO_CACHE"
