"""The page escapes every piece of model and data text."""

import re

import pytest

from mrtpo_openrlhf.diagnostics.html import render_page, token_heatmap
from mrtpo_openrlhf.diagnostics.stats import pair_stats, summarize

NASTY = ['<script>alert("x")</script>', " & ", "'q'", 'a"b', "\n", ""]


def test_heatmap_escapes_tokens_and_scales_to_row_max():
    q = [0.5, 0.25, 0.0, 0.1, 0.0, 0.05]
    out = token_heatmap(NASTY, q, {"tags": [True, False, False, False, False, False]})
    assert "<script>" not in out and "</script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert " &amp; " in out and "&#x27;q&#x27;" in out and "a&quot;b" in out
    assert "↵\n" in out and "∅" in out  # newline and empty token stay visible
    alphas = [float(a) for a in re.findall(r"rgba\(220,38,38,([0-9.]+)\)", out)]
    assert alphas == pytest.approx([1.0, 0.5, 0.0, 0.2, 0.0, 0.1], abs=1e-3)
    titles = re.findall(r'title="([^"]*)"', out)
    assert len(titles) == 6 and "q=0.2500" in titles[1]
    assert out.count("sp-tags") == 1


def test_heatmap_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        token_heatmap(["a", "b"], [0.1])
    with pytest.raises(ValueError, match="span mask"):
        token_heatmap(["a", "b"], [0.1, 0.2], {"tags": [True]})


def test_page_escapes_prompt_block_reason_and_names():
    q = [0.5, 0.25, 0.0, 0.1, 0.0, 0.05]
    stats = pair_stats(q, {})
    reward = {
        "name": "<b>fmt</b>",
        "value": 0.0,
        "reason": "found <think> & </think>",
        "block": "<script>x</script>",
        "q": q,
        "stats": stats,
        "span_masks": {},
    }
    resp = {
        "prompt_index": 0,
        "sample": 0,
        "prompt": "<|im_start|>user\n<img src=x onerror=alert(1)>",
        "response_text": "".join(NASTY),
        "tokens": NASTY,
        "rewards": [reward],
    }
    summary = summarize([{"reward": "<b>fmt</b>", "value": 0.0, "stats": stats}])
    page = render_page(summary, [resp], {"model": "<m>", "data": "a&b"})
    body = page.split("</style>", 1)[1]
    for raw in ("<script>", "<img", "<b>fmt", "<think>", "<m>", "<|im_start|>"):
        assert raw not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body and "a&amp;b" in body
    assert "<script" not in page.lower()  # no script anywhere, escaped or the page's own
    assert page.count('class="tok') == len(NASTY)
    assert "http://" not in page and "https://" not in page  # self-contained
