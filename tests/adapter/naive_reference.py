"""An independent reference for the experience maker's central path: plain Python loops written from the formulas
in README's "The method, as implemented" (no helper of ``mrtpo_openrlhf.core`` is used here).

    A[i,k] = (r[i,k] - mean_g) / (std_g + eps)     (Bessel std, 0 where the reward is constant in its group)
    S[i]   = sum_k A[i,k]
    w[i,k,t] = (1 - beta) + beta * q[i,k,t] / mean_t q[i,k,:]   (1 where q[i,k,:] is all 0)
    a[i,t] = sum_k w[i,k,t] * A[i,k]
    final  = (a - mean_B S) / (std_B S + eps)
"""

import math


def mean(xs):
    return sum(xs) / len(xs)


def bessel_std(xs):
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def group_advantages(rewards, n, eps=1e-4, present=None):
    """rewards: list of B lists of K floats; present: same shape of bools (absent values take no part)."""
    B, K = len(rewards), len(rewards[0])
    present = present or [[True] * K for _ in range(B)]
    A = [[0.0] * K for _ in range(B)]
    for g in range(0, B, n):
        for k in range(K):
            rows = [i for i in range(g, g + n) if present[i][k]]
            vals = [rewards[i][k] for i in rows]
            if len(vals) < 2 or max(vals) == min(vals):
                continue
            m, s = mean(vals), bessel_std(vals)
            for i in rows:
                A[i][k] = (rewards[i][k] - m) / (s + eps)
    return A


def weights(q_row, beta):
    """q_row: list of T floats -> list of T weights."""
    m = mean(q_row) if q_row else 0.0
    if m <= 0:
        return [1.0] * len(q_row)
    return [(1 - beta) + beta * x / m for x in q_row]


def token_advantages(A_row, q_rows, beta, placed=None):
    """One response: A_row (K,), q_rows K lists of T floats; placed[k] False = uniform placement for k."""
    T = len(q_rows[0])
    out = [0.0] * T
    for k, a in enumerate(A_row):
        w = weights(q_rows[k], beta) if placed is None or placed[k] else [1.0] * T
        for t in range(T):
            out[t] += w[t] * a
    return out


def batch_step(token_rows, S, eps=1e-4):
    m, s = mean(S), bessel_std(S)
    return [[(x - m) / (s + eps) for x in row] for row in token_rows]


def cap_binds(A_row, q_rows, beta, cap):
    """One response: per token, does the cap change the advantage? A token receives sum_k max(w_k - 1, 0) * A_k;
    the cap allows at most cap * max_k |max(w_k - 1, 0) * A_k| of it."""
    T = len(q_rows[0])
    ws = [weights(q_rows[k], beta) for k in range(len(A_row))]
    out = []
    for t in range(T):
        got = [max(ws[k][t] - 1, 0.0) * A_row[k] for k in range(len(A_row))]
        out.append(abs(sum(got)) > cap * max(abs(x) for x in got) + 1e-6)
    return out


def capped_token_advantages(A_row, q_rows, beta, cap=None):
    """One response under "mrtpo" placement with the cap: what a token receives from all rewards (the positive
    parts of (w_k - 1) * A_k) is at most cap times the largest single reward's part; what it gives is not capped."""
    T = len(q_rows[0])
    ws = [weights(q_rows[k], beta) for k in range(len(A_row))]
    out = []
    for t in range(T):
        parts = [(ws[k][t] - 1) * A_row[k] for k in range(len(A_row))]
        recv = [max(ws[k][t] - 1, 0.0) * A_row[k] for k in range(len(A_row))]
        give = sum(p - r for p, r in zip(parts, recv))
        total = sum(recv)
        if cap is not None:
            bound = cap * max(abs(r) for r in recv)
            total = min(max(total, -bound), bound)
        out.append(sum(A_row) + total + give)
    return out
