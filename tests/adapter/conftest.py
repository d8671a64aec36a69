"""Adapter tests: upstream objects built without Ray, tiny random models (flash_attn stubbed in tests/conftest.py
only when missing)."""

import os
import sys

import pytest

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
