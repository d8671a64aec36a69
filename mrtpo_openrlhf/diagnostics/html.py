"""The self-contained diagnostics page: inline CSS, no scripts, no external assets.

Every piece of model or data text goes through ``html.escape(..., quote=True)``; tokens are escaped one
by one, so a token like ``<script>`` or ``"&`` is shown as text, never interpreted.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

HEAT_RGB = (220, 38, 38)  # red; opacity = q / row max
SPAN_LABELS = {
    "tags": "tags",
    "select_columns": "SELECT list",
    "function_name": "function name",
    "tool_arguments": "tool arguments",
    "target": "constraint target",
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1f2328;
  background:#fff;max-width:1320px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#57606a;font-size:13px;margin-bottom:14px}
table{border-collapse:collapse;font-size:13px;margin:8px 0 4px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f6f8fa} td.name,th.name{text-align:left}
.note{color:#57606a;font-size:12px;max-width:1100px}
.card{border:1px solid #d0d7de;border-radius:8px;padding:10px 14px;margin:14px 0;background:#fcfcfd}
.card h3{font-size:15px;margin:0 0 6px}
details>summary{cursor:pointer;color:#0969da;font-size:13px}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;border-radius:6px;padding:8px;font-size:12px;
  margin:6px 0}
.reward{border-top:1px dashed #d0d7de;padding-top:8px;margin-top:8px}
.rhead{font-size:13px;margin-bottom:4px}
.val1{color:#1a7f37;font-weight:600} .val0{color:#cf222e;font-weight:600}
.reason{color:#57606a} .stats{color:#57606a;font-size:12px;margin:2px 0 4px}
.heat{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;line-height:1.75;
  white-space:pre-wrap;word-break:break-word;border:1px solid #eaeef2;border-radius:6px;padding:6px 8px;
  background:#fff}
.tok{border-radius:2px}
.sp-tags{box-shadow:inset 0 -2px 0 #0969da}
.sp-select_columns,.sp-tool_arguments,.sp-target{box-shadow:inset 0 -2px 0 #1a7f37}
.legend{font-size:12px;color:#57606a;margin:6px 0}
.swatch{display:inline-block;width:40px;height:10px;vertical-align:middle;
  background:linear-gradient(90deg,rgba(220,38,38,0),rgba(220,38,38,1))}
.muted{color:#8c959f;font-style:italic;font-size:12px}
"""


def esc(text: Any) -> str:
    """HTML-escape any value (quotes included, so it is safe inside attributes)."""
    return html.escape("" if text is None else str(text), quote=True)


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def ratio(x: float | None) -> str:
    return "–" if x is None else f"×{x:.2f}"


def visible_token(token: str) -> str:
    """Token text as shown: newlines get a visible mark (then still break the line), empty -> ∅."""
    if token == "":
        return "∅"
    return token.replace("\r", "␍").replace("\n", "↵\n")


def token_heatmap(
    tokens: Sequence[str], q: Sequence[float], span_masks: Mapping[str, Sequence[bool]] | None = None
) -> str:
    """One reward's heatmap: a <span> per token, background opacity q[t] / max(q), q in the tooltip.

    tokens: T decoded token strings; q: T values; span_masks: kind -> T bools (tokens in a measured
    span are underlined, blue for tags, green for the other kinds).
    """
    if len(tokens) != len(q):
        raise ValueError(f"{len(tokens)} tokens but {len(q)} relevance values")
    for kind, mask in (span_masks or {}).items():
        if len(mask) != len(tokens):
            raise ValueError(f"span mask {kind!r} has {len(mask)} entries for {len(tokens)} tokens")
    top = max(q, default=0.0)
    parts = []
    for t, (tok, val) in enumerate(zip(tokens, q)):
        alpha = val / top if top > 0 else 0.0
        cls = " ".join(["tok"] + [f"sp-{kind}" for kind, m in (span_masks or {}).items() if m[t]])
        title = f"#{t} q={val:.4f} ({100 * alpha:.0f}% of max) {tok!r}"
        style = f"background:rgba({HEAT_RGB[0]},{HEAT_RGB[1]},{HEAT_RGB[2]},{alpha:.3f})"
        parts.append(f'<span class="{cls}" style="{style}" title="{esc(title)}">{esc(visible_token(tok))}</span>')
    return f'<div class="heat">{"".join(parts)}</div>'


def _span_cell(entry: Mapping[str, Any] | None) -> str:
    if not entry or entry.get("distance_share") is None:
        return "–"
    return f"{pct(entry['distance_share'])} / {pct(entry['token_share'])} ({ratio(entry['ratio'])})"


def summary_table(summary: Mapping[str, Any]) -> str:
    """The localization table: one row per reward group, plus "all"."""
    rows = dict(summary["rewards"])
    rows["all"] = summary["all"]
    kinds = sorted({k for r in rows.values() for k in r["spans"]})
    head = "".join(f"<th>{esc(SPAN_LABELS.get(k, k))}<br>dist / tokens (ratio)</th>" for k in kinds)
    out = [
        '<table><tr><th class="name">reward</th><th>pairs</th><th>replayed</th><th>mean value</th>'
        f"<th>tokens for 80%<br>of distance</th><th>top-20%<br>share</th>{head}</tr>"
    ]
    for name, r in rows.items():
        mean_value = "–" if r["mean_value"] is None else f"{r['mean_value']:.2f}"
        cells = "".join(f"<td>{_span_cell(r['spans'].get(k))}</td>" for k in kinds)
        label = f"<b>{esc(name)}</b>" if name == "all" else esc(name)
        out.append(
            f'<tr><td class="name">{label}</td><td>{r["pairs"]}</td><td>{r["replayed"]}</td><td>{mean_value}</td>'
            f"<td>{pct(r['tokens_for_80pct'])}</td><td>{pct(r['top20_share'])}</td>{cells}</tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _pair_stats_line(stats: Mapping[str, Any]) -> str:
    if not stats or stats.get("total_distance", 0) <= 0:
        return ""
    bits = [
        f"80% of the distance on {pct(stats['tokens_for_80pct'])} of the tokens",
        f"top-20% share {pct(stats['top20_share'])}",
    ]
    for kind, s in stats["spans"].items():
        bits.append(f"{esc(SPAN_LABELS.get(kind, kind))}: {_span_cell(s)}")
    return f'<div class="stats">{" · ".join(bits)}</div>'


def reward_section(tokens: Sequence[str], reward: Mapping[str, Any]) -> str:
    """One (response, reward) pair: header, reason, block, stats and heatmap (or why there is none)."""
    value = float(reward["value"])
    head = (
        f'<div class="rhead"><b>{esc(reward["name"])}</b> = <span class="val{1 if value > 0 else 0}">{value:g}</span>'
    )
    if reward.get("reason"):
        head += f' <span class="reason">— {esc(reward["reason"])}</span>'
    head += "</div>"
    block = reward.get("block") or ""
    block_html = (
        f"<details><summary>verifier block ({len(block)} chars)</summary><pre>{esc(block)}</pre></details>"
        if block
        else '<div class="muted">empty verifier block: not replayed (uniform placement)</div>'
    )
    q = reward.get("q")
    if not block:
        heat = ""
    elif q is None or max(q, default=0.0) <= 0:
        heat = '<div class="muted">zero distance everywhere (the block did not change any prediction)</div>'
    else:
        heat = token_heatmap(tokens, q, reward.get("span_masks"))
    return f'<div class="reward">{head}{block_html}{_pair_stats_line(reward.get("stats") or {})}{heat}</div>'


def response_card(resp: Mapping[str, Any]) -> str:
    """One sampled response with its prompt (collapsed) and one section per reward."""
    title = f"Prompt {resp['prompt_index']} · sample {resp['sample']} · {len(resp['tokens'])} tokens"
    totals = ", ".join(f"{esc(r['name'])}={float(r['value']):g}" for r in resp["rewards"])
    body = "".join(reward_section(resp["tokens"], r) for r in resp["rewards"])
    return (
        f'<div class="card"><h3>{esc(title)}</h3><div class="stats">{totals}</div>'
        f"<details><summary>prompt</summary><pre>{esc(resp['prompt'])}</pre></details>"
        f"<details><summary>response text</summary><pre>{esc(resp['response_text'])}</pre></details>"
        f"{body}</div>"
    )


def _ci(row: Mapping[str, Any] | None) -> str:
    if not row or row.get("mean") is None:
        return "–"
    if row.get("low") is None:
        return pct(row["mean"])
    return f"{pct(row['mean'])} [{pct(row['low'])}, {pct(row['high'])}]"


def null_table(summary: Mapping[str, Any]) -> str:
    """Each reward against its null block (``stats.null_control``), or "" when the null was off."""
    rows = []
    for name, nc in sorted((summary.get("null_control") or {}).items()):
        spans = "; ".join(
            f"{SPAN_LABELS.get(kind, kind)}: {_ci(sp['reward'])} vs {_ci(sp['null'])}"
            + (" (beats its null)" if nc["beats_null_on_span"].get(kind) else "")
            for kind, sp in sorted(nc["spans"].items())
        )
        tok = nc["tokens_for_80pct"]
        rows.append(
            f'<tr><td class="name">{esc(name)}</td><td>{nc["responses"]}</td><td class="name">{esc(spans or "–")}</td>'
            f"<td>{esc(_ci(tok['reward']))}</td><td>{esc(_ci(tok['null']))}</td><td>{esc(_ci(tok['random']))}</td></tr>"
        )
    if not rows:
        return ""
    head = (
        "<tr><th class='name'>reward</th><th>responses</th><th class='name'>distance share on its span: reward vs "
        "null</th><th>tokens for 80%: reward</th><th>null</th><th>random profile</th></tr>"
    )
    text = esc((summary.get("null") or {}).get("text", ""))
    return (
        f"<h2>Against the null block</h2><table>{head}{''.join(rows)}</table>"
        f'<p class="note">The null block "{text}" is a sentence no reward reads, removed the way each reward\'s own '
        "block is; the random profile is i.i.d. exponential per token. A reward localizes when it beats its null, "
        "not when it beats uniform. Means with 95% intervals over responses.</p>"
    )


def render_page(summary: Mapping[str, Any], responses: Sequence[Mapping[str, Any]], run_info: Mapping[str, Any]) -> str:
    """The whole page.

    summary: ``stats.summarize`` output; responses: per response {"prompt_index", "sample", "prompt",
    "response_text", "tokens", "rewards": [{"name", "value", "reason", "block", "q", "stats", "span_masks"}]};
    run_info: flat key -> value shown under the title.
    """
    meta = " · ".join(f"{esc(k)}: {esc(v)}" for k, v in run_info.items())
    cards = "\n".join(response_card(r) for r in responses)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>MRTPO relevance diagnostics</title>
<style>{CSS}</style></head>
<body>
<h1>MRTPO relevance diagnostics</h1>
<div class="meta">{meta}</div>
<h2>Localization</h2>
{summary_table(summary)}
<p class="note">Per (response, reward) pair, q[t] is the JS distance (normalized by ln 2) between the next-token
distributions with and without the reward's verifier block. "tokens for 80%": fraction of tokens holding 80% of
the distance (mean over replayed pairs with non-zero distance). "top-20% share": share of the distance on the top
20% of tokens. Span columns: mean share of the distance on the span / mean share of tokens in the span
(ratio = the two divided; 1 = no preference).</p>
<div class="legend">Heatmap: background <span class="swatch"></span> = q / max q of that row (hover a token for
its value). Underlined tokens lie in a measured span: <span class="sp-tags">tags</span>,
<span class="sp-target">SELECT list / tool arguments / constraint target</span>.</div>
{null_table(summary)}
<h2>Responses ({len(responses)})</h2>
{cards}
</body></html>
"""


ADV_RGB = {True: (26, 127, 55), False: (207, 34, 46)}  # green: the token gains probability, red: it loses


def signed_heatmap(tokens: Sequence[str], values: Sequence[float], label: str = "A") -> str:
    """Token advantages: green above 0, red below, opacity |value| / max |value|; the value in the tooltip."""
    if len(tokens) != len(values):
        raise ValueError(f"{len(tokens)} tokens but {len(values)} values")
    top = max((abs(v) for v in values), default=0.0)
    parts = []
    for t, (tok, val) in enumerate(zip(tokens, values)):
        alpha = abs(val) / top if top > 0 else 0.0
        r, g, b = ADV_RGB[val >= 0]
        title = f"#{t} {label}={val:+.4f} {tok!r}"
        style = f"background:rgba({r},{g},{b},{alpha:.3f})"
        parts.append(f'<span class="tok" style="{style}" title="{esc(title)}">{esc(visible_token(tok))}</span>')
    return f'<div class="heat">{"".join(parts)}</div>'


def run_credit_page(rows: Sequence[Mapping[str, Any]], run_info: Mapping[str, Any]) -> str:
    """A training run's page (``run_page.render``): per kept response, each reward's q heatmap and the token
    advantage it placed, then the advantages the loss got. rows: ``run_page.RunSamples`` rows plus
    ``reward_advantages`` (K, L)."""
    meta = " · ".join(f"{esc(k)}: {esc(v)}" for k, v in run_info.items())
    cards = []
    for row in rows:
        tokens = row["tokens"]
        sections = []
        for k, name in enumerate(row["names"]):
            if not name:
                continue
            a_k = row["group_advantages"][k]
            q = row["q"][k]
            heat = (
                token_heatmap(tokens, q)
                if max(q, default=0.0) > 0
                else '<div class="muted">not replayed (A = 0 or no block): placed uniformly</div>'
            )
            sections.append(
                f'<div class="reward"><div class="rhead"><b>{esc(name)}</b> = {float(row["values"][k]):g} · '
                f'GDPO advantage A = {a_k:+.3f}</div><div class="stats">q (relevance)</div>{heat}'
                f'<div class="stats">token advantage this reward placed</div>'
                f"{signed_heatmap(tokens, row['reward_advantages'][k])}</div>"
            )
        title = f"step {row['step']} · response {row['row']} · {len(tokens)} tokens"
        cards.append(
            f'<div class="card"><h3>{esc(title)}</h3>{"".join(sections)}<div class="reward"><div class="rhead">'
            f"<b>all rewards</b>: the token advantages the loss got</div>"
            f"{signed_heatmap(tokens, row['advantages'])}</div></div>"
        )
    first = rows[0] if rows else {}
    how = f"placement {first.get('mode')}, beta {first.get('beta')}" + (
        f", relevance measure {first['measure']}" if first.get("measure") else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>MRTPO: where each reward's credit went</title>
<style>{CSS}</style></head>
<body>
<h1>Where each reward's credit went</h1>
<div class="meta">{meta} · {esc(how)}</div>
<p class="note">Responses this run replayed at its last replaying step, as training used them (nothing replayed
again). Red: q[t], the JS distance between the next-token distributions with and without the reward's verifier
block. Green / red: the token advantage the reward placed (its GDPO advantage A spread over the tokens by q; with
beta 0 or without a block, evenly), and at the bottom the advantages the loss got (all rewards, after GDPO's batch
step, the length penalty and the clip). Hover a token for its value.</p>
{"".join(cards) or '<p class="note">no replayed responses were kept</p>'}
</body></html>
"""
