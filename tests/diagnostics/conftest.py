import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A seeded tiny random Qwen2 with the SmolLM2 tokenizer (no download)."""
    from mrtpo_openrlhf.models import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
