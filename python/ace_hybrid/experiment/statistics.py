"""The table's numbers: every row's metrics with 95% bootstrap intervals, and the paired differences it declares.

Every test metric of a row is pooled over its episodes (seed x test pair) and given a 95% percentile bootstrap
interval from :data:`BOOTSTRAP_DRAWS` draws with the generator seeded by :data:`BOOTSTRAP_SEED`. The design is crossed
(every row plays the same test pairs; every training row trains with the same seeds), so a draw resamples the test
pairs and, independently, the training seeds, each with replacement, and applies the same draw to every row (Owen's
pigeonhole bootstrap for crossed designs, Ann. Appl. Stat. 2007); baselines have no seed level. The paired difference
between two rows is computed within each draw, so what the rows share (the pairs, the seeds, one training for the
rows of one ``deploy_topk``) cancels. Survival rate is grid2op's: total steps survived over total steps playable,
summed over the episodes (not the mean of per-episode rates; the two agree when the episodes have equal lengths).
With 2-3 seeds the seed level is coarse and the interval is a lower bound on the uncertainty.

Primary comparisons (named in the experiment file before it runs) are one family whose family-wise error rate is
held at :data:`ALPHA` by Holm's step-down procedure (Holm, Scand. J. Statist. 1979) on the paired bootstrap
p-values, p = 2 min(P*(Δ <= 0), P*(Δ >= 0)) over the same draws that give the difference's interval. Every other
comparison is exploratory: its interval is for itself alone.

Every comparison is made in survival (its verdict) and, as secondary figures on the same draws, in episode reward and
the L2RPN score (:data:`~ace_hybrid.experiment.metrics.SECONDARY`). The Holm family is the primary comparisons in
survival alone, unless the file's ``holm`` adds the secondary metrics: then it is every primary comparison in each of
them. A file's ``reward_vs`` asks for relative differences in episode reward, (A − B) / |B|, with their interval from
the same draws (:func:`relative_difference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ace_hybrid.experiment.metrics import COMPARED, EPISODE_FIELDS, SECONDARY, TEST_METRIC, TEST_METRICS, TRAIN_METRICS
from ace_hybrid.experiment.spec import TRAINING_KINDS, ExperimentSpec, Primary, RowSpec

BOOTSTRAP_DRAWS = 10_000
"""Bootstrap draws of every interval."""
BOOTSTRAP_SEED = 250602522
"""Seed of the bootstrap's generator (numpy's default_rng), fixed so a table is reproduced to the digit."""
LEVEL = 0.95
"""Coverage of the intervals (percentile bootstrap)."""
ALPHA = 0.05
"""Family-wise error rate of the primary comparisons (Holm-adjusted p below it: "separated (Holm)")."""


@dataclass(frozen=True)
class Resample:
    """One set of bootstrap draws over a crossed design (training seeds x test pairs), shared by every row.

    A draw is a multiplicity for each test pair and, independently, for each training seed (resampling each with
    replacement): a row's statistic in that draw weights the episode (seed s, pair p) by ``seed_counts[s] *
    pair_counts[p]``. Rows without seeds (baselines) weight by the pairs alone.
    """

    seeds: tuple[int, ...]
    """The training seeds, in the order of ``seed_counts``' columns."""
    pair_counts: np.ndarray
    """(draws, test pairs) int64: how often each test pair is drawn."""
    seed_counts: np.ndarray
    """(draws, seeds) int64: how often each training seed is drawn."""

    @classmethod
    def draw(cls, seeds: Sequence[int], n_pairs: int, draws: int = BOOTSTRAP_DRAWS,
             seed: int = BOOTSTRAP_SEED, clusters: Sequence[Any] | None = None) -> Resample:
        """``draws`` resamples of ``n_pairs`` test pairs and of ``seeds``, from ``numpy.random.default_rng(seed)``
        (pairs first, then seeds: the same arguments give the same draws).

        ``clusters`` (one label per pair, e.g. its scenario) resamples whole clusters instead of pairs: every pair
        of a drawn cluster comes with it. Episodes of one week share its hours, so they are not independent, and
        resampling them one by one would make the interval too narrow when several seeds play each week.
        """
        if n_pairs < 1 or draws < 1:
            raise ValueError(f"n_pairs = {n_pairs}, draws = {draws}: both must be >= 1")
        rng = np.random.default_rng(seed)
        if clusters is None:
            pairs = rng.multinomial(n_pairs, np.full(n_pairs, 1.0 / n_pairs), size=draws)
        else:
            if len(clusters) != n_pairs:
                raise ValueError(f"{len(clusters)} cluster labels for {n_pairs} test pairs: give one per pair")
            _, inverse = np.unique(np.asarray(clusters), return_inverse=True)
            n_clusters = int(inverse.max()) + 1
            pairs = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=draws)[:, inverse]
        n_seeds = max(1, len(seeds))
        seed_counts = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=draws)
        return cls(tuple(int(s) for s in seeds), pairs, seed_counts[:, : len(seeds)])

    def statistic(self, row: dict[str, Any], key: str) -> tuple[float | None, np.ndarray]:
        """A row's test metric ``key`` (:data:`~ace_hybrid.experiment.metrics.TEST_METRICS`) on all its episodes,
        and in every draw (NaN where a draw leaves nothing to divide by).

        ``row`` is a row of results.json: ``row["seeds"]`` (None for a baseline) and ``row["episodes"][field]``, a
        (seeds, test pairs) matrix per field.
        """
        _, _, _, num, den, _ = TEST_METRIC[key]
        if num not in row["episodes"]:  # a results.json written before this field was recorded
            return None, np.full(self.pair_counts.shape[0], np.nan)
        top = np.asarray(row["episodes"][num], dtype=np.float64)
        bottom = np.asarray(row["episodes"][den], dtype=np.float64) if den else np.ones_like(top)
        if top.shape[1] != self.pair_counts.shape[1]:
            raise ValueError(f"row {row.get('id')!r} has {top.shape[1]} test pairs, the draws "
                             f"{self.pair_counts.shape[1]}")
        if np.isnan(top).any() or np.isnan(bottom).any():  # some cell did not record it: no figure, not a wrong one
            return None, np.full(self.pair_counts.shape[0], np.nan)
        if row["seeds"] == [None]:
            weights = np.ones((self.pair_counts.shape[0], 1))
        else:
            missing = [s for s in row["seeds"] if s not in self.seeds]
            if missing:
                raise ValueError(f"row {row.get('id')!r} has seed(s) {missing} outside the draws' seeds {self.seeds}")
            weights = self.seed_counts[:, [self.seeds.index(s) for s in row["seeds"]]].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = ((weights @ top) * self.pair_counts).sum(1) / ((weights @ bottom) * self.pair_counts).sum(1)
        total = float(bottom.sum())
        return (float(top.sum()) / total if total else None), draws


def interval(draws: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The percentile interval of bootstrap draws (NaN draws ignored; (None, None) when all are NaN)."""
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return None, None
    lo, hi = np.percentile(finite, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def cluster_draws(values: np.ndarray, clusters: np.ndarray, draws: int = BOOTSTRAP_DRAWS,
                  seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Bootstrap draws of the mean of ``values`` resampling whole ``clusters`` (e.g. the decisions of one episode,
    which are not independent); ``values`` may be (N,) or (N, k), giving (draws,) or (draws, k), so paired columns
    (two juniors on the same decisions) share their draws."""
    ids, inverse = np.unique(clusters, return_inverse=True)
    v = np.asarray(values, dtype=np.float64)
    sums = np.stack([np.bincount(inverse, weights=c, minlength=ids.size) for c in v.reshape(len(v), -1).T], 1)
    counts = np.bincount(inverse, minlength=ids.size).astype(np.float64)
    picks = np.random.default_rng(seed).integers(0, ids.size, size=(draws, ids.size))
    out = sums[picks].sum(1) / counts[picks].sum(1)[:, None]
    return out if v.ndim > 1 else out[:, 0]


def p_value(draws: np.ndarray) -> float | None:
    """Two-sided bootstrap p-value of a difference: 2 min(P*(Δ <= 0), P*(Δ >= 0)) over the finite draws, at most 1
    (None when every draw is NaN). The smallest nonzero value is 2 / draws; 0 means no draw crossed 0."""
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return None
    return float(min(1.0, 2.0 * min(np.mean(finite <= 0), np.mean(finite >= 0))))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni step-down adjusted p-values, in the order given.

    With the m p-values sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)) (1-based):
    rejecting where the adjusted p < alpha holds the family-wise error rate at alpha. A None (a comparison without
    data) still counts in m, as p = 1, so leaving rows out of a run never makes the others' correction milder; its
    adjusted p stays None.
    """
    m = len(p_values)
    filled = [1.0 if p is None else float(p) for p in p_values]
    adjusted: list[float | None] = [None] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: filled[k])):
        running = max(running, min(1.0, (m - rank) * filled[i]))
        adjusted[i] = None if p_values[i] is None else running
    return adjusted


def points(value: float) -> str:
    """A survival difference in percentage points, signed: ``+12.5``."""
    return f"{100 * value:+.1f}"


def _seed_level(row: dict[str, Any]) -> list[int]:
    return [] if row["seeds"] == [None] else list(row["seeds"])


def paired_difference(resample: Resample, a: dict[str, Any], b: dict[str, Any],
                      key: str = "survival_rate") -> dict[str, Any]:
    """Row ``a`` minus row ``b`` on metric ``key``, with the interval of the difference within each draw.

    Returns ``{"a", "b", "metric", "a_value", "b_value", "difference", "lo", "hi", "p", "separated", "pairs",
    "seeds"}``; ``separated`` is True when the interval excludes 0, the only case in which the report states an
    exploratory difference; ``p`` is :func:`p_value` of the same draws (what Holm's correction of the primary
    comparisons adjusts). ``seeds`` counts the training seeds resampled (those of the training rows among the two).
    """
    va, da = resample.statistic(a, key)
    vb, db = resample.statistic(b, key)
    lo, hi = interval(da - db)
    diff = None if va is None or vb is None else va - vb
    return {"a": a["id"], "b": b["id"], "metric": key, "a_value": va, "b_value": vb, "difference": diff,
            "lo": lo, "hi": hi, "p": p_value(da - db), "separated": lo is not None and (lo > 0 or hi < 0),
            "pairs": int(resample.pair_counts.shape[1]),
            "seeds": len(set(_seed_level(a)) | set(_seed_level(b)))}


def _restriction(row: dict[str, Any]) -> tuple[float, float, float]:
    """How a row's policy alone is restricted: (``deploy_among``, ``deploy_sure``, ``deploy_threshold``), 0 where
    not."""
    return row.get("deploy_among") or 0, row.get("deploy_sure") or 0, row.get("deploy_threshold") or 0


def comparisons_to_make(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The table's declared comparisons, (row a, row b, why), fixed by the rows' kinds before any number is seen:

    - the check's share: each ``+ top-k check`` row against its own ``(policy alone)`` row (same best.pt);
    - the restriction's share: each ``(policy alone, among K)``, ``(policy alone, sure P)`` and ``(policy alone, from
      rho T)`` row against its own ``(policy alone)`` row (``deploy_among``, ``deploy_sure``, ``deploy_threshold``:
      the row's, else its run's own ``env.deploy_among``, ``env.deploy_sure``, ``env.deploy_threshold``);
    - "deployed the same way" below means the same ``deploy_topk``, ``deploy_shortlist``, ``deploy_among``,
      ``deploy_sure``, ``deploy_threshold`` and budget (``budgets``);
    - against doing nothing: every training row (does learning help at all?);
    - against SAC-only: every other training row against the SAC-only row deployed the same way;
    - against expert-guided RL: every ACE row against the expert-guided row deployed the same way;
    - against ACE: every other ACE row (a variant or an ablation) against the first ACE row deployed the same way;
    - against the greedy expert: every other row;
    - against the tutor (expert-guided RL's teacher acting alone): every training row with a top-k check.

    SAC-only is the first ``sac-only`` training, expert-guided RL the first ``expert-guided`` one.
    """
    def first(kind: str, key: str = "id") -> str | None:
        return next((r[key] for r in rows if r["kind"] == kind), None)

    sac, guided, ace = first("sac-only", "train_id"), first("expert-guided", "train_id"), first("ace", "train_id")
    greedy, tutor, nothing = first("greedy"), first("tutor"), first("do-nothing")

    def same_deployment(train_id: str | None, row: dict[str, Any]) -> str | None:
        return next((r["id"] for r in rows if train_id is not None and r["train_id"] == train_id
                     and r.get("deploy_topk") == row.get("deploy_topk") and r.get("budget") == row.get("budget")
                     and (r.get("deploy_shortlist") or 0) == (row.get("deploy_shortlist") or 0)
                     and _restriction(r) == _restriction(row)), None)

    out: list[tuple[str, str, str]] = []
    for r in rows:
        if r.get("deploy_topk") or any(_restriction(r)):
            # The first row of the same training alone (the file's order puts the unrestricted one first), other
            # than a restricted row itself.
            alone = next((x["id"] for x in rows if x["train_id"] == r["train_id"] and x.get("deploy_topk") == 0
                          and x.get("budget") == r.get("budget")
                          and (r.get("deploy_topk") or _restriction(x) != _restriction(r))), None)
            if alone:
                why = "the top-k check's share" if r.get("deploy_topk") else "the restriction's share"
                out.append((r["id"], alone, why))
    for r in rows:
        if nothing is not None and r["kind"] in TRAINING_KINDS:
            out.append((r["id"], nothing, "against doing nothing"))
    for r in rows:
        if r["kind"] in TRAINING_KINDS and r["train_id"] != sac:
            other = same_deployment(sac, r)
            if other:
                out.append((r["id"], other, "against SAC-only"))
    for r in rows:
        if r["kind"] == "ace":
            other = same_deployment(guided, r)
            if other:
                out.append((r["id"], other, "against expert-guided RL"))
    for r in rows:
        if r["kind"] == "ace" and r["train_id"] != ace:
            other = same_deployment(ace, r)
            if other:
                out.append((r["id"], other, "against ACE"))
    for r in rows:
        if greedy is not None and r["id"] != greedy:
            out.append((r["id"], greedy, "against the greedy expert"))
    for r in rows:
        if tutor is not None and r["kind"] in TRAINING_KINDS and r.get("deploy_topk"):
            out.append((r["id"], tutor, "against the tutor"))
    return list(dict.fromkeys(out))


def compare_rows(rows: Sequence[dict[str, Any]], seeds: Sequence[int], n_pairs: int, *,
                 primaries: Sequence[Primary] = (), holm_metrics: Sequence[str] = ("survival",),
                 draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED,
                 clusters: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """The paired survival differences (see :func:`paired_difference`), each with the names of its rows, why it is
    made and whether it is primary, and its differences in the secondary metrics under ``"secondary"`` (metric key ->
    :func:`paired_difference`'s figures): first the ``primaries`` in their order, with ``p_holm`` (:func:`holm` over
    all of them, and over their secondary differences in the metrics ``holm_metrics`` names: "survival", "reward",
    "score"; a primary whose rows did not run counts, with no data), then the exploratory comparisons of
    :func:`comparisons_to_make` that are not already primary (either way round). ``clusters``: as
    :meth:`Resample.draw`'s."""
    resample = Resample.draw(seeds, n_pairs, draws, seed, clusters)
    by_id = {r["id"]: r for r in rows if r["n"]}
    declared = comparisons_to_make([r for r in rows if r["n"]])
    reasons = {(a, b): why for a, b, why in declared}
    out = []
    for p in primaries:
        why = reasons.get((p.a, p.b), "named primary")
        out.append({**_all_differences(resample, by_id.get(p.a), by_id.get(p.b), p.a, p.b), "a_name": p.a_name,
                    "b_name": p.b_name, "why": why, "primary": True})
    _holm_family(out, holm_metrics)
    named = {(p.a, p.b) for p in primaries} | {(p.b, p.a) for p in primaries}
    for a, b, why in declared:
        if (a, b) not in named:
            out.append({**_all_differences(resample, by_id[a], by_id[b], a, b), "a_name": by_id[a]["name"],
                        "b_name": by_id[b]["name"], "why": why, "primary": False})
    return out


def _all_differences(resample: Resample, a: dict[str, Any] | None, b: dict[str, Any] | None, a_id: str,
                     b_id: str) -> dict[str, Any]:
    """:func:`paired_difference` in survival, with those in the secondary metrics under ``"secondary"``; figures of
    None when either row has no data."""
    def one(key: str) -> dict[str, Any]:
        if a is not None and b is not None:
            return paired_difference(resample, a, b, key)
        return {"a": a_id, "b": b_id, "metric": key, "a_value": None, "b_value": None, "difference": None,
                "lo": None, "hi": None, "p": None, "separated": False, "pairs": int(resample.pair_counts.shape[1]),
                "seeds": 0}

    return {**one("survival_rate"), "secondary": {key: one(key) for key in SECONDARY}}


def _holm_family(primary: list[dict[str, Any]], holm_metrics: Sequence[str]) -> None:
    """Set ``p_holm`` of each primary comparison in survival, and of its secondary differences in the metrics
    ``holm_metrics`` names, by :func:`holm` over all of them at once (one family)."""
    keys = [COMPARED[m] for m in holm_metrics]
    family = [(c, key) for c in primary for key in keys]
    figures = [c if key == "survival_rate" else c["secondary"][key] for c, key in family]
    for figure, adjusted in zip(figures, holm([f["p"] for f in figures])):
        figure["p_holm"] = adjusted
    for c in primary:
        c.setdefault("p_holm", None)


def relative_difference(resample: Resample, a: dict[str, Any], b: dict[str, Any],
                        key: str = "episode_reward") -> dict[str, Any]:
    """Row ``a`` relative to row ``b`` on metric ``key``: (A − B) / |B| (a fraction; 0.222 is +22.2%), with the 95%
    interval of the same ratio within each draw (a draw where B is 0 is left out).

    Returns ``{"a", "b", "metric", "a_value", "b_value", "relative", "lo", "hi"}``.
    """
    va, da = resample.statistic(a, key)
    vb, db = resample.statistic(b, key)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = (da - db) / np.abs(db)
    lo, hi = interval(np.where(db == 0, np.nan, ratio))
    relative = None if va is None or vb is None or vb == 0 else (va - vb) / abs(vb)
    return {"a": a["id"], "b": b["id"], "metric": key, "a_value": va, "b_value": vb, "relative": relative,
            "lo": lo, "hi": hi}


def relative_differences(rows: Sequence[dict[str, Any]], seeds: Sequence[int], n_pairs: int,
                         named: Sequence[Primary], *, draws: int = BOOTSTRAP_DRAWS,
                         seed: int = BOOTSTRAP_SEED, clusters: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """The file's ``reward_vs`` comparisons (:func:`relative_difference` in episode reward), on the draws of
    :func:`compare_rows`, each with its rows' names; figures of None for a row that did not run."""
    resample = Resample.draw(seeds, n_pairs, draws, seed, clusters)
    by_id = {r["id"]: r for r in rows if r["n"]}
    out = []
    for p in named:
        if p.a in by_id and p.b in by_id:
            result = relative_difference(resample, by_id[p.a], by_id[p.b])
        else:
            result = {"a": p.a, "b": p.b, "metric": "episode_reward", "a_value": None, "b_value": None,
                      "relative": None, "lo": None, "hi": None}
        out.append({**result, "a_name": p.a_name, "b_name": p.b_name})
    return out


def _row_record(spec: ExperimentSpec, row: RowSpec, cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of results.json: its per-episode matrices (cells x test pairs) and per-seed training costs."""
    index = {tuple(p): i for i, p in enumerate(spec.pairs)}
    episodes = {f: np.full((len(cells), len(index)), np.nan) for f in EPISODE_FIELDS}
    for i, cell in enumerate(cells):
        for e in (cell.get("test") or {}).get("episodes", []):
            j = index.get((e["scenario"], e["seed"]))
            if j is None:
                raise ValueError(f"cell {cell['cell']} played ({e['scenario']}, {e['seed']}), not a {spec.on} pair")
            for f in EPISODE_FIELDS:
                episodes[f][i, j] = np.nan if e.get(f) is None else float(e[f])
    if cells and np.isnan(episodes["max_steps"]).any():
        raise ValueError(f"row {row.id!r}: some cells lack test episodes; delete their files in cells/ and rerun")
    guided = any(float((c.get("config") or {}).get("train", {}).get("tutor_steps", 0) or 0) > 0 for c in cells)
    among, sure, threshold = row.among, row.sure, row.threshold
    if row.topk == 0 and cells:  # the run's own env.deploy_among, _sure, _threshold: how it was deployed
        own = (cells[0].get("config") or {}).get("env", {})
        among = among if among is not None else own.get("deploy_among") or None
        sure = sure if sure is not None else own.get("deploy_sure") or None
        threshold = threshold if threshold is not None else own.get("deploy_threshold") or None
    return {"id": row.id, "name": row.name, "kind": row.kind, "train_id": row.train_id, "train_name": row.train_name,
            "deploy_topk": row.topk, "deploy_shortlist": row.shortlist, "deploy_among": among, "deploy_sure": sure,
            "deploy_threshold": threshold, "budget": row.budget, "expert_guided": guided, "n": len(cells),
            "seeds": [c["seed"] for c in cells],
            "episodes": {f: episodes[f].tolist() for f in EPISODE_FIELDS}, "metrics": {}}


def aggregate(spec: ExperimentSpec, cells: list[dict[str, Any]], *, draws: int = BOOTSTRAP_DRAWS,
              seed: int = BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """The table's rows, each with its per-episode matrices and, per metric, its value and interval.

    Test metrics (:data:`~ace_hybrid.experiment.metrics.TEST_METRICS`): ``{"value"`` (pooled over the row's
    episodes), ``"lo", "hi"`` (the 95% bootstrap interval of :class:`Resample`, over the file's ``cluster``),
    ``"values"`` (per seed), ``"mean", "std"`` (over seeds; std with 2+ values)``}``. Training costs: ``{"values",
    "mean", "std"}``.
    """
    rows = [_row_record(spec, row, [c for c in cells if c["row"] == row.id]) for row in spec.rows]
    resample = Resample.draw(spec.seeds, len(spec.pairs), draws, seed, spec.clusters)
    for record in rows:
        mine = [c for c in cells if c["row"] == record["id"]]
        for key, *_ in (*TEST_METRICS, *TRAIN_METRICS):
            values = [float(c["metrics"][key]) for c in mine if c["metrics"].get(key) is not None]
            stat: dict[str, Any] = {"values": values, "mean": float(np.mean(values)) if values else None,
                                    "std": float(np.std(values, ddof=1)) if len(values) >= 2 else None}
            if key in TEST_METRIC and mine:
                value, boot = resample.statistic(record, key)
                stat["value"] = value
                stat["lo"], stat["hi"] = interval(boot)
            record["metrics"][key] = stat
    return rows
