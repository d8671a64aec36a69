"""Adapter tests: upstream objects built without Ray, tiny random models, flash_attn stubbed only when missing."""

import importlib.util
import os
import sys

import pytest

if importlib.util.find_spec("flash_attn") is None:
    from mrtpo_openrlhf.cpu import flash_attn_stub

    flash_attn_stub.install()

# importlib import mode does not put test folders on sys.path; the shared fakes live here.
sys.path.insert(0, os.path.dirname(__file__))

VOCAB = 101


class CharTokenizer:
    """A deterministic offline tokenizer: one id per character (mod the tiny vocab), no chat template."""

    pad_token_id = 0
    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + (ord(c) % (VOCAB - 3)) for c in text]}

    def decode(self, ids):
        """One printable character per id (not the inverse of ``__call__``: ids are taken mod the vocab)."""
        return "".join(chr(ord("!") + i % 90) for i in ids)


@pytest.fixture
def char_tokenizer():
    return CharTokenizer()
