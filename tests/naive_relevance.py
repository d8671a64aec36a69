"""Independent references for the relevance measures: plain loops over response tokens in fp64, written from the
formulas in ``core/relevance.py``'s docstrings (no helper of ``mrtpo_openrlhf.core`` is used here).

    js[t]          = sqrt(JSD(p_t, m_t) / ln 2),  p_t = softmax(z_full[t] / tau), m_t = softmax(z_minus[t] / tau)
    loggap[t]      = 1 - exp(-|log p_t[y_t] - log m_t[y_t]|)   (y_t: the sampled token)
    js-contrast[t] = max(0, js[t] - js_null[t])                (js_null: full vs full with the null block)
"""

import copy
import math

import torch


def fp64_model(model):
    """A float64 copy of ``model`` (the reference's forwards carry no fp32 rounding)."""
    return copy.deepcopy(model).double().eval()


@torch.no_grad()
def response_logits(model64, context, response):
    """(n, V) fp64 logits predicting each response token after ``context``, one unpadded forward."""
    ids = torch.tensor([list(context) + list(response)])
    logits = model64(input_ids=ids).logits[0].double()
    return logits[len(context) - 1 : len(context) - 1 + len(response)]


def _softmax(row, tau):
    z = [float(x) / tau for x in row]
    top = max(z)
    e = [math.exp(x - top) for x in z]
    s = sum(e)
    return [x / s for x in e]


def js(full, minus, tau=1.0):
    out = []
    for t in range(full.shape[0]):
        p, m = _softmax(full[t], tau), _softmax(minus[t], tau)
        jsd = 0.0
        for a, b in zip(p, m):
            mix = (a + b) / 2
            jsd += (0.5 * a * math.log(a / mix) if a > 0 else 0.0) + (0.5 * b * math.log(b / mix) if b > 0 else 0.0)
        out.append(math.sqrt(max(jsd, 0.0) / math.log(2)))
    return out


def loggap(full, minus, response, tau=1.0):
    out = []
    for t, y in enumerate(response):
        lp = math.log(_softmax(full[t], tau)[y])
        lm = math.log(_softmax(minus[t], tau)[y])
        out.append(1.0 - math.exp(-abs(lp - lm)))
    return out


def contrast(js_reward, js_null):
    return [max(0.0, a - b) for a, b in zip(js_reward, js_null)]


def q(model64, request, key, measure, tau=1.0):
    """The reference q of one (request, minus key) pair under ``measure``, as a list over response tokens."""
    resp = list(request.response_ids)
    full = response_logits(model64, request.full_context, resp)
    minus = response_logits(model64, request.minus_contexts[key], resp)
    if measure == "js":
        return js(full, minus, tau)
    if measure == "loggap":
        return loggap(full, minus, resp, tau)
    if measure == "js-contrast":
        null = response_logits(model64, request.null_context, resp)
        return contrast(js(full, minus, tau), js(full, null, tau))
    raise ValueError(measure)
