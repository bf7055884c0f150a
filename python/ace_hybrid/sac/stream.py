"""The streamed passes of the fast update: the blocked online softmax over (actions, B) blocks, the policy gradient
formed block by block, and the sampler of the sampled policy gradient (see docs/sac.md, "How an update is
computed")."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["DTYPE", "MASKED", "Factors", "Stream", "Workspace", "count_legal", "policy_entropy", "mask_logits_",
           "pack_mask", "policy_gradient", "sample_actions", "sampled_logit_grad", "soft_stream"]

DTYPE = torch.float32
MASKED = torch.finfo(DTYPE).min
BLOCK_FLOATS = 1 << 18
"""Elements of one (actions, B) block of the streamed passes on a CPU: 1 MB of float32, so a block's few
buffers stay in the L2 cache between passes (1,024 actions at B = 256; measured fastest of 512 / 1,024 / 2,048
actions per block with bench_sac.py)."""
FAN = 8
"""The sampler's tree (:func:`sample_actions`): a block splits into groups of FAN**2 actions, those into groups
of FAN, those into actions; blocks hold whole groups. A draw reads rows / FAN**2 + 2 * FAN numbers, measured
~3x faster than one level of 32-action groups."""
EXP2_FLOOR = -126.0
"""exp2() arguments are clamped here first: float32 exp2 is slow (~2.5x per vector of 8, measured) on inputs
below -126, whose results are denormal or 0; 2^-126 = 1.2e-38 is still a normal float."""
RAW_MAX_FLOOR = 2.0**-64
""":func:`soft_stream` takes its running maximum over all actions, legal or not, and reruns over the legal ones
only for a state whose legal sum S = sum 2^(z2 - M) falls below this: the terms the 2^-126 clamp changes are
then at most n 2^-126 / S < 2^-45 of S for n < 2^17."""


class Factors(NamedTuple):
    """One network's scores as factors, detached: scores(s, a) = h[s] . emb[a] + bias[a]."""

    h: torch.Tensor
    """(B, k) state factor."""
    emb: torch.Tensor
    """(n, k) action factor (row-major; the cached E, or the linear head's weight)."""
    bias: torch.Tensor | None
    """(n,) per-action bias, or None where it is a column of ``emb`` (against a column of ones in ``h``)."""


class Workspace:
    """Buffers of the streamed passes for batch size ``bsz``, kept between updates (a fresh (n, B) tensor per
    update costs ~70 ms of page faults at n = 67,105, B = 256).

    ``rows`` actions per block, rounded up to a multiple of ``FAN**2``: by default about ``BLOCK_FLOATS / bsz``
    on a CPU, all n on other devices. ``z``, ``q``, ``w``, ``p``, ``keep``, ``neg`` hold one (rows, B) block and
    ``bits`` its unpacked mask; ``p_all`` (blocks * rows, B, zero past n) keeps the actor pass's 2^(z2 - M) and
    ``w_all`` (n, B) its w, for the gradient sweep or the sampler; ``sums_t`` holds the sampler's sums over groups
    of ``FAN`` and ``FAN**2`` actions, (B, groups)."""

    def __init__(self, n: int, bsz: int, device: torch.device, rows: int | None = None) -> None:
        self.bsz = bsz
        if rows is None:
            rows = BLOCK_FLOATS // bsz if device.type == "cpu" else n
        group = FAN * FAN
        self.rows = max(group, min(-(-n // group), -(-rows // group)) * group)
        self.n_blocks = -(-n // self.rows)
        f = {"dtype": DTYPE, "device": device}
        self.z, self.q, self.w, self.p, self.keep, self.neg = (torch.empty(self.rows, bsz, **f) for _ in range(6))
        self.bits = torch.empty(self.rows // 8, 8, bsz, dtype=torch.uint8, device=device)
        self.shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=device)[None, :, None]
        self.p_all = torch.zeros(self.n_blocks * self.rows, bsz, **f)
        self.w_all = torch.empty(n, bsz, **f)
        self.sums = [torch.empty(self.rows // FAN, bsz, **f), torch.empty(self.rows // FAN**2, bsz, **f)]
        self.sums_t = [torch.empty(bsz, self.n_blocks * self.rows // FAN, **f),
                       torch.empty(bsz, self.n_blocks * self.rows // FAN**2, **f)]

    def blocks(self, n: int) -> list[tuple[int, int]]:
        return [(lo, min(lo + self.rows, n)) for lo in range(0, n, self.rows)]

    def legal_block(self, packed: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """(hi - lo, B) float32 0/1 legality of actions lo..hi-1 (in ``keep``), from the transposed packed mask."""
        r8 = -(-(hi - lo) // 8)
        bits = self.bits[:r8]
        torch.bitwise_right_shift(packed[lo // 8:lo // 8 + r8, None, :], self.shifts, out=bits).bitwise_and_(1)
        keep = self.keep[:hi - lo]
        keep.copy_(bits.view(-1, self.bsz)[:hi - lo])
        return keep


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """(ceil(n / 8), B) uint8: the (B, n) bool mask packed along the actions (big-endian bits) and transposed.

    Streaming over blocks of actions needs the mask as (actions, B); transposing the bytes of a (256, 67,105)
    bool mask takes longer than packing it to 2 MB, transposing that and unpacking each block with two
    vectorised passes (:meth:`Workspace.legal_block`; measured ~2.5x faster)."""
    return np.ascontiguousarray(np.packbits(mask, axis=1).T)


def mask_logits_(z: torch.Tensor, keep: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``z`` with ``finfo.min`` where ``keep`` (0/1 float, same shape) is 0, in place; ``scratch`` is overwritten.

    ``z + (keep - 1) * finfo.max``: z - finfo.max rounds to exactly finfo.min for any |z| < 1e31, never to -inf,
    and keep = 1 adds exactly 0. Two vectorised passes (a ``masked_fill_`` or ``torch.where`` with a bool mask is
    several times slower on a CPU)."""
    return z.add_(torch.sub(keep, 1.0, out=scratch), alpha=-MASKED)


def count_legal(packed: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B,) int64 legal actions per row: a popcount of the packed mask (numpy >= 2.0), else a count of ``mask``."""
    popcount = getattr(np, "bitwise_count", None)
    if popcount is None:  # pragma: no cover - numpy < 2.0
        return np.count_nonzero(mask, axis=1).astype(np.int64)
    return popcount(packed).sum(0, dtype=np.int64)


class Stream(NamedTuple):
    """Per-state results of :func:`soft_stream`, each (B,) unless noted. The stream works in base 2 (logits
    times log2(e), ``exp2``: about twice as fast as ``exp`` on a CPU, measured); fields named ``*2`` are in
    those units."""

    log_z: torch.Tensor
    """log sum_a legal exp z(a) (a huge negative number where no action is legal)."""
    mean_w: torch.Tensor
    """E_pi[w] with w = min_j Q_j - alpha z (zeros in mode "sample", which has no Q)."""
    mean_z: torch.Tensor
    """E_pi[z] (modes "grad" and "sample"; zeros in mode "value")."""
    any_legal: torch.Tensor
    """bool: the state has at least one legal action."""
    max2: torch.Tensor
    """The final running maximum M of the legal logits, base 2."""
    total: torch.Tensor
    """S = sum_a legal 2^(z2(a) - M) (1 where no action is legal)."""
    block_max2: list[torch.Tensor]
    """Modes "grad" and "sample": the running maximum M_j after each block (base 2); block j's stored values
    are relative to it (times 2^(M_j - M) relative to M)."""
    block_sum: list[torch.Tensor]
    """Mode "sample": sum over block j of 2^(z2 - M_j) at legal actions."""


LOG2E = 1.0 / math.log(2.0)


def _scores_block(emb: torch.Tensor, h: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``out`` (rows, B) = emb @ h.T (+ bias[:, None]). Without a bias (folded into emb and h as a column) the
    product writes ``out`` directly; ``addmm`` with a bias first copies the broadcast bias into it, a pass over
    the block that cost ~15% of a product (measured)."""
    if bias is None:
        return torch.mm(emb, h.t(), out=out)
    return torch.addmm(bias[:, None], emb, h.t(), out=out)


def soft_stream(pi: Factors, q1: Factors | None, q2: Factors | None, packed: torch.Tensor, alpha: float,
                ws: Workspace, mode: str, *, legal_max: bool = False) -> Stream:
    """Streams the policy's softmax and the soft value over blocks of actions (see docs/sac.md).

    Per block: the products ``E_blk @ h.T + bias`` (the policy's scaled by log2(e): z2), w = min(Q1, Q2) -
    alpha z, the legal logits' maximum, p = keep * 2^max(z2 - M, -126) with M the running maximum (earlier
    sums are rescaled by 2^(M_old - M) when it grows), then S += sum p and A += sum p w. ``packed`` is the
    legality mask from :func:`pack_mask`; a state with no legal action gets ``any_legal`` False (its other
    values are placeholders). ``mode``:

    * "value": the soft value only (the critic target);
    * "grad": also E_pi[z], and the blocks' p and w kept in ``ws.p_all`` / ``ws.w_all`` for
      :func:`policy_gradient`;
    * "sample": no critics (``q1``, ``q2`` None); E_pi[z], and the blocks' p in ``ws.p_all`` with their group
      sums in ``ws.sums_t``, for :func:`sample_actions`.

    M is the running maximum over all actions, legal or not: any M at or above the legal maximum gives the same
    softmax, and skipping the masking of z (two passes of :func:`mask_logits_` per block) saves ~10% of a pass.
    Only the clamp at 2^-126 sees the difference: it is exact while the legal terms are not negligible against
    2^-126 * n, i.e. while S = sum of the legal 2^(z2 - M) stays above ``RAW_MAX_FLOOR``. A state below it (its
    illegal logits over ~64 base-2 units above its legal ones) makes the stream rerun with ``legal_max`` (z
    masked to finfo.min first, M over the legal actions only), the previous method."""
    n = pi.emb.shape[0]
    bsz = pi.h.shape[0]
    dev = pi.h.device
    h2, bias2 = pi.h * LOG2E, None if pi.bias is None else pi.bias * LOG2E
    alpha2 = alpha / LOG2E  # w = m - alpha z = m - alpha ln(2) z2
    run_max = torch.full((bsz,), MASKED, dtype=DTYPE, device=dev)
    s, a, d = (torch.zeros(bsz, dtype=DTYPE, device=dev) for _ in range(3))
    maxima: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    for lo, hi in ws.blocks(n):
        r = hi - lo
        z = ws.z[:r]
        w = ws.w_all[lo:hi] if mode == "grad" else ws.w[:r]
        p = ws.p[:r] if mode == "value" else ws.p_all[lo:hi]
        _scores_block(pi.emb[lo:hi], h2, None if bias2 is None else bias2[lo:hi], z)
        if q1 is not None and q2 is not None:
            q = ws.q[:r]
            _scores_block(q1.emb[lo:hi], q1.h, None if q1.bias is None else q1.bias[lo:hi], w)
            _scores_block(q2.emb[lo:hi], q2.h, None if q2.bias is None else q2.bias[lo:hi], q)
            torch.minimum(w, q, out=w).sub_(z, alpha=alpha2)  # min Q - alpha z: finite everywhere
        keep = ws.legal_block(packed, lo, hi)
        if legal_max:
            mask_logits_(z, keep, ws.neg[:r])
        new_max = torch.maximum(run_max, z.amax(0))
        rescale = torch.exp2(run_max - new_max)
        s.mul_(rescale)
        a.mul_(rescale)
        d.mul_(rescale)
        run_max = new_max
        torch.sub(z, run_max, out=p).clamp_min_(EXP2_FLOOR).exp2_().mul_(keep)  # exactly 0 where illegal
        if mode == "sample":  # group sums, stored (B, groups) so that a draw reads its group's contiguously
            fine, coarse = ws.sums
            torch.sum(ws.p_all[lo:lo + ws.rows].view(-1, FAN, bsz), 1, out=fine)
            torch.sum(fine.view(-1, FAN, bsz), 1, out=coarse)
            ws.sums_t[0][:, lo // FAN:(lo + ws.rows) // FAN].copy_(fine.t())
            ws.sums_t[1][:, lo // FAN**2:(lo + ws.rows) // FAN**2].copy_(coarse.t())
            block_sum = coarse.sum(0)
            sums.append(block_sum)
        else:
            block_sum = p.sum(0)
        s.add_(block_sum)
        if mode == "value":  # A += sum p w
            a.add_(w.mul_(p).sum(0))
        elif mode == "grad":  # the same, keeping w for the gradient
            a.add_(torch.mul(w, p, out=ws.w[:r]).sum(0))
        if mode != "value":  # E_pi[z] needs sum p z2: 0 times a finite z2 where illegal
            d.add_(z.mul_(p).sum(0))
            maxima.append(run_max)
    any_legal = s > 0
    if not legal_max and bool((any_legal & (s < RAW_MAX_FLOOR)).any()):
        return soft_stream(pi, q1, q2, packed, alpha, ws, mode, legal_max=True)
    total = torch.where(any_legal, s, 1.0)
    return Stream(log_z=(run_max + total.log2()) / LOG2E, mean_w=a / total, mean_z=d / total / LOG2E,
                  any_legal=any_legal, max2=run_max, total=total, block_max2=maxima, block_sum=sums)


def policy_entropy(st: Stream, n_legal: torch.Tensor) -> torch.Tensor:
    """(B,) the policy's entropy log Z - E_pi[z] per state, exactly 0 where a single action is legal (the stream's
    maximum includes illegal actions, so log Z and E_pi[z] of a lone legal action differ by rounding), so that
    such a state leaves the temperature unchanged."""
    return torch.where(n_legal > 1, st.log_z - st.mean_z, 0.0)


def _first_above(cum: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows of cumulative sums ``cum`` (..., m) and values ``u`` (..., j), the first index i of each value's
    row with cum[i] > u, and u minus the cumulative sum before i. ``u`` is first clamped below the row's total
    (rounding can put it at or above it), so i always exists and has positive mass: an entry of zero mass
    repeats its predecessor's sum and is never "the first above"."""
    total = cum[..., -1:]
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    i = torch.searchsorted(cum, u, right=True)
    before = torch.where(i > 0, cum.gather(-1, (i - 1).clamp_min(0)), 0.0)
    return i, u - before


def sample_actions(st: Stream, ws: Workspace, k: int, generator: torch.Generator) -> torch.Tensor:
    """(B, k) int64: k independent draws per state from pi (legal actions only), after a "sample" stream.

    Inverse CDF down a tree, vectorised over the B * k draws: a block by the blocks' masses (rescaled to the
    final maximum), then a group of ``FAN**2`` actions, a group of ``FAN`` and an action, each by the sums
    one level down; a draw reads a few dozen numbers. Illegal and padding actions have zero
    mass and are never drawn (:func:`_first_above`). Uniforms come from ``generator`` (CPU), then move to the
    device."""
    dev = st.max2.device
    bsz = st.max2.shape[0]
    scale = torch.exp2(torch.stack(st.block_max2) - st.max2).t().contiguous()  # (B, blocks)
    cum = torch.cumsum(torch.stack(st.block_sum).t() * scale, 1)  # (B, blocks)
    u = torch.rand(bsz, k, generator=generator, dtype=DTYPE).to(dev) * cum[:, -1:]
    block, u = _first_above(cum, u)
    u = (u / scale.gather(1, block)).unsqueeze(-1)  # in the block's own units, 2^(z2 - M_j)
    col = torch.arange(bsz, device=dev)[:, None, None]
    fine_t, coarse_t = ws.sums_t
    per_block = ws.rows // FAN**2
    fan = torch.arange(FAN, device=dev)
    first = (block * per_block).unsqueeze(-1)  # (B, k, 1): the block's first coarse group
    g, u = _first_above(torch.cumsum(torch.take(coarse_t, col * coarse_t.shape[1] + first
                                                + torch.arange(per_block, device=dev)), -1), u)
    first = (first + g) * FAN  # the chosen coarse group's first fine group
    g, u = _first_above(torch.cumsum(torch.take(fine_t, col * fine_t.shape[1] + first + fan), -1), u)
    first = (first + g) * FAN  # the chosen fine group's first action
    i, _ = _first_above(torch.cumsum(torch.take(ws.p_all, (first + fan) * bsz + col), -1), u)
    return (first + i).squeeze(-1)


def sampled_logit_grad(f: torch.Tensor, scale: float) -> torch.Tensor:
    """(B, k) coefficients c of the sampled policy gradient: d loss / d z(s, a) is estimated by
    ``sum_j c[s, j] [a_j = a]`` for draws a_j ~ pi(.|s), where f = alpha log pi(a_j) - min_j Q_j(s, a_j).

    This is the score-function identity ``grad E_pi[f] = E_pi[f grad log pi]`` (the derivative of f itself
    through log pi has expectation zero) with a leave-one-out baseline (Kool et al. 2019, "Buy 4 REINFORCE
    samples, get a baseline for free!"): (f_j - mean of the other k - 1) / k = (f_j - mean f) / (k - 1). The
    baseline does not depend on a_j, so the estimate stays unbiased, and it sums to zero over j, so the
    ``- pi(a)`` part of ``grad log pi`` cancels and the estimate touches only the drawn actions."""
    k = f.shape[1]
    return (f - f.mean(1, keepdim=True)).mul_(scale / (k - 1))


def policy_gradient(pi: Factors, st: Stream, ws: Workspace, scale: float,
                    d_emb: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``scale * sum_s loss(s)`` with respect to the actor's h (B, k), E (n, k) and bias (n,), from
    the blocks a "grad" :func:`soft_stream` kept.

    d loss(s) / d z(s, a) = pi(a|s) (t(a) - sum_b pi(b|s) t(b)) with t = alpha log pi - min Q = -w - alpha log Z,
    i.e. pi(a|s) (E_pi[w] - w(a)) (the log-derivative term sums to zero); 0 at illegal actions, where the stored
    p is 0. Block j's pi is p_j 2^(M_j - M) / S (base 2, see :class:`Stream`), a per-state factor that is
    folded into h (for E's gradient) and into the (B, k) partial products (for h's), so each block costs two
    elementwise passes and two products: ``g_j @ h`` and ``g_j.T @ E_j``. E's gradient is written into ``d_emb``
    when given (an (n, k) buffer), else into a new tensor."""
    n, k = pi.emb.shape
    bsz = pi.h.shape[0]
    d_h = torch.zeros(bsz, k, dtype=DTYPE, device=pi.h.device)
    if d_emb is None:
        d_emb = torch.empty(n, k, dtype=DTYPE, device=pi.h.device)
    d_bias = torch.empty(n, dtype=DTYPE, device=pi.h.device)
    part = torch.empty(bsz, k, dtype=DTYPE, device=pi.h.device)
    c = st.mean_w
    for (lo, hi), m_j in zip(ws.blocks(n), st.block_max2):
        coef = torch.exp2(m_j - st.max2).mul_(-scale).div_(st.total)  # (B,): -scale pi / p_j
        g = ws.w_all[lo:hi].sub_(c).mul_(ws.p_all[lo:hi])  # p_j (w - E_pi[w]); coef * g is the gradient
        torch.mm(g, pi.h * coef[:, None], out=d_emb[lo:hi])
        torch.mv(g, coef, out=d_bias[lo:hi])
        torch.mm(g.t(), pi.emb[lo:hi], out=part)
        d_h.addcmul_(part, coef[:, None])
    return d_h, d_emb, d_bias

