"""Experiment files: reading, checking and expanding them into table rows, each with its validated configuration.

An experiment file (TOML) names the environment configuration, the held-out test episodes, the seeds and the rows::

    name = "make_run"
    config = "../configs/l2rpn_neurips_2020_track1.toml"  # relative to this file; its eval_pairs select best.pt
    set = ["train.total_env_steps=5000"]                  # overrides applied to every row
    ace_set = ["llm.backend=smollm2"]                     # overrides of the LLM rows (ace, lac)
    seeds = [0, 1, 2]                                     # train.seed (and llm.seed) of the training rows
    test_pairs = [[0, 100], [1, 101]]                     # held-out (scenario, seed): never env.eval_pairs
    validation_pairs = [[0, 200], [1, 201]]               # where configurations are chosen (--on validation)
    test_max_steps = 0                                    # cut test episodes (0: full length)
    greedy_budget = 30                                    # simulations per decision of the greedy expert
    primary = [["ACE (policy alone)", "SAC-only (policy alone)"],   # A - B, named before the run: Holm-corrected
               ["each trained row (policy alone)", "DoNothing"]]
    budgets = [20000, 40000, 100000]                      # optional: train once to the largest, test at each
    score = true                                          # optional: grid2op's L2RPN score of every test episode
    holm = ["survival"]                                   # metrics of the Holm family (+ "reward", "score")
    cluster = "scenario"                                  # optional: intervals resample whole scenarios, not pairs
    reward_vs = [["ACE (policy alone)", "SAC-only (policy alone)"]]  # (A - B) / |B| in episode reward
    paper_note = "ACE vs SAC in episode reward: +x% (paper)"        # the paper's figure, shown beside them

    [[rows]]
    name = "ACE w/o actor"   # display name
    kind = "ace"             # do-nothing | reco | greedy | tutor | lac | random-candidate
                             # | sac-only | expert-guided | ace | maskable-ppo
    id = "ace-no-actor"      # file name of its cells (default: the name, lowercased, '-' for other characters)
    set = ["ace.actor=false"]
    deploy_topk = [0, 8]     # training rows only: one table row per value, all from the same training
    deploy_shortlist = [0, 3]  # with deploy_topk: each check also with 3 of its k from the heuristic shortlist
    deploy_among = [8]       # with deploy_topk 0: the policy alone also among do nothing + 7 of the shortlist
    deploy_sure = [0.7]      # with deploy_topk 0: the policy alone also acting only where it gives its choice >= 0.7
    deploy_threshold = [1.0]  # with deploy_topk 0: the policy alone also deciding only from max rho 1.0
    budgets = [20000, 100000]  # replaces the file's budgets for this row ([]: none)
    ppo = { n_steps = 128 }  # maskable-ppo rows only: MaskablePPO's hyperparameters (experiment.ppo_settings)

A row's configuration is: the config file, then ``set``, then ``ace_set`` (LLM rows), then the command line's
``--set``, then the row's ``set``, then what its kind fixes (``llm.backend=none`` for sac-only, expert-guided and
maskable-ppo), then ``train.seed = llm.seed = seed``. Every row's configuration is built and validated before
anything runs, so a bad key fails at once with its name, and a kind that does not match its configuration (an
expert-guided row without ``train.tutor_steps``, a sac-only or maskable-ppo row with them, an ace row without an
LLM) fails naming the row.

A ``maskable-ppo`` row (sb3-contrib's MaskablePPO, the ``rl`` extra) takes from its configuration what every
training row shares: environment, ``env.action_set``, ``[reward]``, threshold, training episodes and seeds, and
``train.total_env_steps`` in grid steps (:mod:`ace_hybrid.training.ppo`); its ``ppo`` table gives PPO's own
hyperparameters (:class:`~ace_hybrid.experiment.ppo_settings.PPOSettings`). It tests its last model (no best.pt).

Kinds are spelled as the command line's agents are (lowercase, hyphenated); a spelling of the unreleased 0.1.0
(``donothing``, ``llm_lac``, ``sac_only``) is an error that names the new one.

``deploy_topk``. A training row with ``deploy_topk = [0, 8]`` becomes two table rows, "NAME (policy alone)" (id
``ID-alone``: the policy's most likely legal action; "A (B, policy alone)" for a name "A (B)") and "NAME + top-8
check" (id ``ID-top8``: the 8 most likely legal actions and do nothing are simulated once each and the lowest
simulated max rho is played). Both test the same ``best.pt`` of one training run per seed on the same pairs, so the
difference between them is the check's share. ``deploy_shortlist = [0, 3]`` beside it adds, for every check (k > 0),
"NAME + top-8 check, 3 from the shortlist" (id ``ID-top8-s3``): the same k + 1 simulations, 3 of the k candidates the
action set's heuristic shortlist (the greedy expert's, ``env.deploy_shortlist``), the other 5 the policy's; each
value must be below every k > 0 of the row; 0 is the plain check. ``best.pt`` itself is chosen on
``env.eval_pairs`` with the run's own ``env.deploy_topk`` (8 by default), also for the row that tests the policy
alone. ``deploy_among = [8]`` beside a ``deploy_topk`` holding 0 adds "NAME (policy alone, among 8)" (id
``ID-among8``): the same ``best.pt`` playing its most likely of do nothing and the first 7 actions of the action set's
heuristic shortlist, none simulated (``env.deploy_among``), so the restriction's share is told apart from what the
policy learnt; each value in [2, 1000]. ``deploy_sure = [0.7]`` beside it adds "NAME (policy alone, sure 0.7)" (id
``ID-sure0.7``): the same ``best.pt`` playing its most likely action only where it gives it a probability of at least
0.7, doing nothing elsewhere (``env.deploy_sure``); each value in (0, 1). ``deploy_threshold = [1.0]`` beside it adds
"NAME (policy alone, from rho 1)" (id ``ID-rho1``): the same ``best.pt`` deciding only where max rho is at least
1.0, the safe rule acting below (``env.deploy_threshold``); each value in [the run's ``env.threshold``, 5]. Without
``deploy_topk`` a row is tested with its run's own ``env.deploy_topk``. ``--rows ID`` keeps every row made from
``ID``; ``--rows ID-top8`` just that one.

``budgets``. The file's (or a row's own) ``budgets`` train each SAC row (sac-only, expert-guided, ace) once, to the
largest (it sets ``train.total_env_steps``), keeping ``best-<steps>.pt`` at each (``train.keep_best_at``: an
evaluation on ``env.eval_pairs`` exactly then, and best.pt as it was, chosen on what was known by then), and test each
as its own table row, as if training had stopped there: "NAME @ 20K" (id ``ID-20k``), and with ``deploy_topk`` "NAME @
20K (policy alone)" (``ID-20k-alone``) and "NAME @ 20K + top-8 check" (``ID-20k-top8``). Every budget's rows share
the one training per seed (``runs/ID-seed<k>``); their training costs (steps, time, LLM calls) are those spent by
that budget. A maskable-ppo row keeps no checkpoints: it takes no ``budgets`` of its own and ignores the file's.

``validation_pairs``. Configurations (budget, action set, updates per decision, r_bar, ...) are chosen on these,
never on the test pairs: ``ace-hybrid experiment --on validation`` (``on="validation"``) tests every row on them
instead and writes ``results-validation.{json,csv,md}`` from ``cells-validation/``, apart from the test results; the
trained runs in ``runs/`` are shared by the two. Test pairs, validation pairs and every row's ``env.eval_pairs``
(which choose best.pt) must be pairwise disjoint, and neither test nor validation pairs may be training episodes
(``env.train_seed_start + k``); an overlap is a ValueError naming the pairs.

``score``. With ``score = true`` every cell also computes grid2op's L2RPN score of each test episode
(:func:`ace_hybrid.grid.scores.score_report`, as ``ace-hybrid evaluate --score``): the table gains an "L2RPN score"
column and every paired difference a score column beside survival's and episode reward's. It replays each episode
through grid2op's runner, so a cell's test time about doubles (plus two reference episodes per (scenario, seed), once).

``holm``, ``reward_vs``, ``paper_note``. The Holm family is the primary comparisons in survival; ``holm = ["survival",
"reward", "score"]`` (any of the last two) makes it every primary comparison in each metric named, one family.
``reward_vs`` lists ``[A, B]`` rows (names or ids, as in ``primary``) whose relative difference in episode reward,
(A − B) / |B|, is reported with its bootstrap interval, exploratory; ``paper_note`` (free text) quotes the paper's
figure beside it.

``cluster``. ``"pair"`` (default): intervals resample test pairs. ``"scenario"``: they resample whole scenarios,
every pair of a drawn scenario together (:meth:`~ace_hybrid.experiment.statistics.Resample.draw`'s ``clusters``):
the honest interval when several seeds play each scenario and share its chronics (the generated weeks, whose
episodes of one week share its last half-week). Results only: no cell is played again.

``primary``. The comparisons the experiment is run to decide, named before it runs: a list of ``[A, B]`` (A − B in
survival), each a table row's display name or id (a row with ``deploy_topk`` is named by one of its table rows:
"ACE (policy alone)" / ``ace-alone``, "ACE + top-7 check" / ``ace-top7``; with budgets "ACE @ 20K (policy alone)" /
``ace-20k-alone``). :data:`EACH_TRAINED` names every
training table row at once, :data:`EACH_TRAINED_ALONE` every one tested by its policy alone (``deploy_topk`` 0):
``["each trained row (policy alone)", "DoNothing"]`` compares each with doing nothing. They are one family, Holm
corrected (:func:`~ace_hybrid.experiment.statistics.holm`); every other comparison is exploratory. A name that is no
row's is a ValueError listing the valid ones. Rows left out by ``--rows`` still count in the family, with no data.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ace_hybrid.config import Config, load_config, read_toml
from ace_hybrid.experiment.held_out import check_disjoint, check_held_out, pair_list
from ace_hybrid.experiment.ppo_settings import PPOSettings

BASELINE_KINDS: tuple[str, ...] = ("do-nothing", "reco", "greedy", "tutor", "junior", "lac", "random-candidate")
"""Rows that only test a fixed agent (:func:`ace_hybrid.agents.make_agent`'s names, and "tutor"). "greedy" is the
greedy expert over the whole catalog with the file's ``greedy_budget`` simulations per decision; "tutor" is
expert-guided RL's tutor acting alone: the greedy expert over the row's action set (``env.action_set``) with
``train.tutor_budget`` simulations per decision; "junior" is the junior file the row's ``train.init_policy`` names
(``ace-hybrid junior fit``: the tutor's decisions cloned), its policy alone; "lac" is the LLM-only LAC agent and "random-candidate" its control,
a random one of the same candidates."""
TRAINING_KINDS: tuple[str, ...] = ("sac-only", "expert-guided", "ace", "maskable-ppo")
"""Rows that train and then test best.pt: SAC alone; expert-guided RL (SAC after the greedy tutor's warm start,
``train.tutor_steps`` > 0, whose decisions fill the validated partition the imitation term learns from); ACE with
its LLM roles; sb3-contrib's MaskablePPO at the same budget (its last model: no checkpoint selection)."""
NO_LLM_KINDS: tuple[str, ...] = ("sac-only", "expert-guided", "maskable-ppo")
"""Training rows without an LLM: ``llm.backend=none`` is fixed for them."""
ROW_KINDS: tuple[str, ...] = BASELINE_KINDS + TRAINING_KINDS
POLICY_KINDS: tuple[str, ...] = (*TRAINING_KINDS, "junior")
"""Rows of a policy, which ``deploy_topk`` may test alone and with the top-k check."""
LLM_KINDS: tuple[str, ...] = ("lac", "ace")
"""Rows that take the experiment's ``ace_set``."""
RENAMED_KINDS = {"donothing": "do-nothing", "llm_lac": "lac", "sac_only": "sac-only"}
"""Kinds of the unreleased 0.1.0 -> the one spelling now, named by the error an old one gets."""

EACH_TRAINED = "each trained row"
"""In ``primary``: every training table row (each deployment of each training)."""
EACH_TRAINED_ALONE = "each trained row (policy alone)"
"""In ``primary``: every training table row that tests the policy alone (``deploy_topk`` value 0)."""

_TOP_KEYS = {"name", "description", "config", "set", "ace_set", "seeds", "test_pairs", "validation_pairs",
             "test_max_steps", "greedy_budget", "rows", "primary", "budgets", "score", "holm", "cluster", "reward_vs",
             "paper_note"}
ON = ("test", "validation")
"""The pairs an experiment can test its rows on (``--on``): the held-out test pairs, or the validation pairs on which
configurations are chosen."""
CLUSTERS = ("pair", "scenario")
"""Valid values of a file's ``cluster``: what the bootstrap resamples."""
_ROW_KEYS = {"name", "id", "kind", "set", "deploy_topk", "deploy_shortlist", "deploy_among", "deploy_sure",
             "deploy_threshold", "ppo", "budgets"}
BUDGET_KINDS: tuple[str, ...] = ("sac-only", "expert-guided", "ace")
"""Training rows that keep a best.pt per budget (``budgets``); MaskablePPO keeps no checkpoints."""
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass
class RowSpec:
    """One row of the table."""

    id: str
    """File-safe identifier (cells, run directories)."""
    name: str
    """Display name."""
    kind: str
    """One of :data:`ROW_KINDS`."""
    overrides: list[str] = field(default_factory=list)
    """``section.key=value`` overrides of this row."""
    topk: int | None = None
    """Top-k simulation check when testing best.pt (None: the run's own ``env.deploy_topk``)."""
    shortlist: int | None = None
    """How many of the check's k come from the heuristic shortlist (None: the run's own ``env.deploy_shortlist``)."""
    among: int | None = None
    """The policy alone among do nothing and the first ``among - 1`` of the heuristic shortlist (None: the run's own
    ``env.deploy_among``)."""
    sure: float | None = None
    """The policy alone acting only where it gives its most likely action at least this probability (None: the
    run's own ``env.deploy_sure``)."""
    threshold: float | None = None
    """The policy alone deciding only where max rho is at least this, the safe rule acting below (None: the run's own
    ``env.deploy_threshold``)."""
    train_id: str = ""
    """Id of the training this row tests (its run directories); rows made by one ``deploy_topk`` share it."""
    train_name: str = ""
    """Display name of that training (the name in the experiment file)."""
    ppo: PPOSettings | None = None
    """MaskablePPO's hyperparameters (``maskable-ppo`` rows only)."""
    budget: int | None = None
    """The environment steps whose ``best-<steps>.pt`` this row tests (None: best.pt at the end)."""
    budgets: tuple[int, ...] = ()
    """Every budget of this row's training (``train.keep_best_at``; the largest is ``train.total_env_steps``)."""

    def __post_init__(self) -> None:
        self.train_id = self.train_id or self.id
        self.train_name = self.train_name or self.name

    @property
    def trains(self) -> bool:
        return self.kind in TRAINING_KINDS


class Primary(NamedTuple):
    """One primary comparison, A − B: the table rows' ids and display names."""

    a: str
    b: str
    a_name: str
    b_name: str


@dataclass
class ExperimentSpec:
    """A parsed experiment file (see the module docstring)."""

    name: str
    path: Path
    config: Path | None
    overrides: list[str]
    ace_overrides: list[str]
    cli_overrides: list[str]
    seeds: list[int]
    test_pairs: list[tuple[int, int]]
    test_max_steps: int
    greedy_budget: int
    rows: list[RowSpec]
    description: str = ""
    row_filter: list[str] | None = None
    """The ``rows`` argument of :func:`load_experiment` (None: every row)."""
    seeds_replaced: bool = False
    """Whether the ``seeds`` argument of :func:`load_experiment` replaced the file's."""
    primaries: list[Primary] = field(default_factory=list)
    """The file's ``primary`` comparisons, expanded, over all its rows (those ``rows`` left out included)."""
    validation_pairs: list[tuple[int, int]] = field(default_factory=list)
    """Where configurations are chosen (the file's ``validation_pairs``; may be empty)."""
    on: str = "test"
    """Which pairs the rows are tested on now: "test" or "validation" (:data:`ON`)."""
    score: bool = False
    """Whether every test episode also gets grid2op's L2RPN score (the file's ``score``)."""
    holm: tuple[str, ...] = ("survival",)
    """The metrics of the primary comparisons' Holm family (the file's ``holm``; survival first)."""
    reward_vs: list[Primary] = field(default_factory=list)
    """The file's ``reward_vs``: rows compared by their relative difference in episode reward."""
    paper_note: str = ""
    """The paper's figure the file quotes beside ``reward_vs`` (free text)."""
    cluster: str = "pair"
    """What the intervals resample (the file's ``cluster``, :data:`CLUSTERS`): test pairs, or whole scenarios."""
    smoke: bool = False
    """A smoke version of the file (:func:`ace_hybrid.experiment.smoke.smoke_version`): tiny, not results."""

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The (scenario, seed) pairs the rows are tested on now: the test or the validation pairs."""
        return self.validation_pairs if self.on == "validation" else self.test_pairs

    @property
    def clusters(self) -> list[int] | None:
        """One label per pair the intervals resample together (its scenario), or None to resample pairs."""
        return [scenario for scenario, _ in self.pairs] if self.cluster == "scenario" else None

    @property
    def suffix(self) -> str:
        """Appended to the names of the cells folder and the results files: "" on the test pairs, "-validation"."""
        return "" if self.on == "test" else f"-{self.on}"

    def cells(self) -> list[tuple[RowSpec, int | None]]:
        """(row, seed) for every cell, in table order; baselines have one cell with seed None."""
        return [(row, seed) for row in self.rows for seed in (self.seeds if row.trains else [None])]

    def row_config(self, row: RowSpec, seed: int | None) -> Config:
        """The validated configuration of one cell (ValueError naming the row and the bad key)."""
        overrides = list(self.overrides)
        if row.kind in LLM_KINDS:
            overrides += self.ace_overrides
        overrides += self.cli_overrides + row.overrides
        if row.kind in NO_LLM_KINDS:
            overrides.append("llm.backend=none")
        if row.budgets:
            overrides += [f"train.total_env_steps={max(row.budgets)}", f"train.keep_best_at={list(row.budgets)}"]
        if seed is not None:
            overrides += [f"train.seed={seed}", f"llm.seed={seed}"]
        try:
            cfg = load_config(self.config, overrides)
        except (ValueError, FileNotFoundError) as exc:
            raise type(exc)(f"row {row.name!r}: {exc}") from None
        _check_kind(row, cfg)
        return cfg

    def command(self, out: str | Path) -> str:
        """The ``ace-hybrid experiment`` command line that runs this experiment into ``out``."""
        words = ["ace-hybrid", "experiment", "--config", str(self.path), "--out", str(out)]
        for item in self.cli_overrides:
            words += ["--set", item]
        if self.row_filter is not None:
            words += ["--rows", ",".join(self.row_filter)]
        if self.seeds_replaced:
            words += ["--seeds", ",".join(map(str, self.seeds))]
        if self.on != "test":
            words += ["--on", self.on]
        if self.smoke:
            words.append("--smoke")
        return shlex.join(words)


def _check_kind(row: RowSpec, cfg: Config) -> None:
    """A row's kind must say what its configuration trains (ValueError naming the row, the key and the fix)."""
    if row.kind == "ace" and cfg.llm.backend == "none":
        raise ValueError(f"row {row.name!r} (kind ace) has llm.backend = 'none': set one in ace_set or the "
                         f"row's set (e.g. llm.backend=smollm2), or use kind sac-only")
    if row.kind == "expert-guided" and cfg.train.tutor_steps == 0 and not cfg.train.tutor_data:
        raise ValueError(f"row {row.name!r} (kind expert-guided) has train.tutor_steps = 0 and no train.tutor_data: "
                         f"give the tutor's warm start in the row's set (e.g. train.tutor_steps=5000), or use kind "
                         f"sac-only")
    if row.kind == "sac-only" and (cfg.train.tutor_steps > 0 or cfg.train.tutor_data):
        data = f" and train.tutor_data = {cfg.train.tutor_data!r}" if cfg.train.tutor_data else ""
        raise ValueError(f"row {row.name!r} (kind sac-only) has train.tutor_steps = {cfg.train.tutor_steps}{data}: "
                         f"with the tutor's decisions it is expert-guided RL: use kind expert-guided")
    if row.kind == "junior" and not cfg.train.init_policy:
        raise ValueError(f"row {row.name!r} (kind junior) has no train.init_policy: name the junior file in the row's "
                         f"set (e.g. train.init_policy=runs/junior/junior-5k.pt, made by ace-hybrid junior fit)")
    if row.kind == "maskable-ppo" and cfg.train.tutor_steps > 0:
        raise ValueError(f"row {row.name!r} (kind maskable-ppo) has train.tutor_steps = {cfg.train.tutor_steps}: "
                         f"MaskablePPO has no tutor's warm start; set train.tutor_steps=0 in the row's set")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-.")


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} = {value!r} must be a list of 'section.key=value' strings")
    return list(value)


def _int(value: Any, where: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{where} = {value!r} must be an integer >= {low}")
    return value


def budget_label(steps: int) -> str:
    """A budget as table rows name it: 20000 -> "20K", 2500 -> "2.5K", 2000000 -> "2M", 150 -> "150"."""
    if steps >= 1_000_000 and steps % 100_000 == 0:
        return f"{steps / 1_000_000:g}M"
    return f"{steps / 1000:g}K" if steps >= 1000 and steps % 100 == 0 else str(steps)


def deployed_rows(row_id: str, name: str, kind: str, overrides: list[str], topks: Any, where: str,
                  ppo: PPOSettings | None = None, budgets: Sequence[int] = (), shortlists: Any = None,
                  amongs: Any = None, sures: Any = None, thresholds: Any = None) -> list[RowSpec]:
    """The table rows of one training row: one per budget, ``deploy_topk`` value, (for a check) ``deploy_shortlist``
    value and (for the policy alone) ``deploy_among``, ``deploy_sure`` and ``deploy_threshold`` value, or the row
    itself without any."""
    if topks is not None:
        _check_topks(topks, kind, name, where)
    if shortlists is not None:
        _check_shortlists(shortlists, topks, name, where)
    if amongs is not None:
        _check_amongs(amongs, topks, name, where)
    if sures is not None:
        _check_sures(sures, topks, name, where)
    if thresholds is not None:
        _check_thresholds(thresholds, topks, name, where)
    rows = []
    for budget in sorted(budgets) or [None]:
        label = "" if budget is None else budget_label(budget)
        rid, rname = (row_id, name) if budget is None else (f"{row_id}-{label.lower()}", f"{name} @ {label}")
        common = {"train_id": row_id, "train_name": name, "ppo": ppo, "budget": budget, "budgets": tuple(budgets)}
        if topks is None:
            rows.append(RowSpec(rid, rname, kind, overrides, **common))
            continue
        alone = f"{rname[:-1]}, policy alone)" if rname.endswith(")") else f"{rname} (policy alone)"
        for k in topks:
            if k == 0:
                rows.append(RowSpec(f"{rid}-alone", alone, kind, overrides, topk=0, **common))
                rows += [RowSpec(f"{rid}-among{m}", f"{alone[:-1]}, among {m})", kind, overrides, topk=0, among=m,
                                 **common) for m in amongs or []]
                rows += [RowSpec(f"{rid}-sure{p:g}", f"{alone[:-1]}, sure {p:g})", kind, overrides, topk=0, sure=p,
                                 **common) for p in sures or []]
                rows += [RowSpec(f"{rid}-rho{t:g}", f"{alone[:-1]}, from rho {t:g})", kind, overrides, topk=0,
                                 threshold=float(t), **common) for t in thresholds or []]
                continue
            for m in shortlists or [None]:
                suffix, words = (f"-s{m}", f", {m} from the shortlist") if m else ("", "")
                rows.append(RowSpec(f"{rid}-top{k}{suffix}", f"{rname} + top-{k} check{words}", kind, overrides,
                                    topk=k, shortlist=m, **common))
    return rows


def _check_shortlists(shortlists: Any, topks: Any, name: str, where: str) -> None:
    checks = [k for k in topks or [] if k > 0]
    if not checks:
        raise ValueError(f"{where}.deploy_shortlist (row {name!r}) needs a top-k check: give deploy_topk with a "
                         f"k > 0 (e.g. [0, 7])")
    if (not isinstance(shortlists, list) or not shortlists
            or not all(isinstance(m, int) and not isinstance(m, bool) and 0 <= m < min(checks) for m in shortlists)
            or len(set(shortlists)) != len(shortlists)):
        raise ValueError(f"{where}.deploy_shortlist = {shortlists!r} (row {name!r}) must be a non-empty list of "
                         f"distinct integers in [0, {min(checks) - 1}] (below every k of deploy_topk; 0: the plain "
                         f"check), e.g. [0, 3]")


def _check_amongs(amongs: Any, topks: Any, name: str, where: str) -> None:
    if 0 not in (topks or []):
        raise ValueError(f"{where}.deploy_among (row {name!r}) restricts the policy alone: give deploy_topk with a 0 "
                         f"(e.g. [0, 7])")
    if (not isinstance(amongs, list) or not amongs
            or not all(isinstance(m, int) and not isinstance(m, bool) and 2 <= m <= 1000 for m in amongs)
            or len(set(amongs)) != len(amongs)):
        raise ValueError(f"{where}.deploy_among = {amongs!r} (row {name!r}) must be a non-empty list of distinct "
                         f"integers in [2, 1000] (do nothing and the first K - 1 of the shortlist), e.g. [8]")


def _check_sures(sures: Any, topks: Any, name: str, where: str) -> None:
    if 0 not in (topks or []):
        raise ValueError(f"{where}.deploy_sure (row {name!r}) gates the policy alone: give deploy_topk with a 0 "
                         f"(e.g. [0, 7])")
    if (not isinstance(sures, list) or not sures
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p < 1 for p in sures)
            or len(set(sures)) != len(sures)):
        raise ValueError(f"{where}.deploy_sure = {sures!r} (row {name!r}) must be a non-empty list of distinct "
                         f"probabilities in (0, 1) (the policy acts only where it is that sure), e.g. [0.7]")


def _check_thresholds(thresholds: Any, topks: Any, name: str, where: str) -> None:
    # That each is at least the row's env.threshold is checked with its configuration (load_experiment).
    if 0 not in (topks or []):
        raise ValueError(f"{where}.deploy_threshold (row {name!r}) sets where the policy alone decides: give "
                         f"deploy_topk with a 0 (e.g. [0, 7])")
    if (not isinstance(thresholds, list) or not thresholds
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t <= 5 for t in thresholds)
            or len(set(thresholds)) != len(thresholds)):
        raise ValueError(f"{where}.deploy_threshold = {thresholds!r} (row {name!r}) must be a non-empty list of "
                         f"distinct max-rho levels in (0, 5] (the policy alone decides from there), e.g. [1.0]")


def _check_topks(topks: Any, kind: str, name: str, where: str) -> None:
    if kind not in POLICY_KINDS:
        raise ValueError(f"{where}.deploy_topk (row {name!r}): kind {kind!r} has no policy; deploy_topk belongs to "
                         f"the rows of a policy ({', '.join(POLICY_KINDS)})")
    if (not isinstance(topks, list) or not topks
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in topks)
            or len(set(topks)) != len(topks)):
        raise ValueError(f"{where}.deploy_topk = {topks!r} (row {name!r}) must be a non-empty list of distinct "
                         f"integers >= 0, e.g. [0, 8] (0: the policy alone)")


def _budgets(value: Any, where: str) -> list[int]:
    """A ``budgets`` list: distinct environment-step counts >= 1 ([] allowed: none)."""
    if (not isinstance(value, list) or len(set(value)) != len(value)
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in value)):
        raise ValueError(f"{where} = {value!r} must be a list of distinct environment-step counts >= 1, e.g. "
                         f"[20000, 40000, 100000]")
    return sorted(value)


def _row_budgets(raw: dict[str, Any], kind: str, name: str, where: str, file_budgets: list[int]) -> list[int]:
    """A row's budgets: its own ``budgets``, else the file's (SAC rows only)."""
    if "budgets" not in raw:
        return file_budgets if kind in BUDGET_KINDS else []
    budgets = _budgets(raw["budgets"], f"{where}.budgets")
    if budgets and kind not in BUDGET_KINDS:
        raise ValueError(f"{where}.budgets (row {name!r}): kind {kind!r} keeps no best.pt per budget; budgets belong "
                         f"to the rows of kinds {', '.join(BUDGET_KINDS)}")
    return budgets


def load_experiment(path: str | Path, overrides: Sequence[str] = (), *, rows: Sequence[str] | None = None,
                    seeds: Sequence[int] | None = None, on: str = "test") -> ExperimentSpec:
    """Read and check an experiment file; build and validate every cell's configuration.

    Parameters
    ----------
    path
        The experiment TOML file.
    overrides
        ``section.key=value`` for every row (the command line's ``--set``), applied before each row's own.
    rows
        Row ids to keep (default all), in the file's order. The id of a row with ``deploy_topk`` keeps every table
        row it makes; ``ID-alone`` or ``ID-top8`` keeps one.
    seeds
        Seeds replacing the file's ``seeds``.
    on
        "test" (the held-out ``test_pairs``) or "validation" (the file's ``validation_pairs``, where configurations
        are chosen): the pairs the rows are tested on.

    Raises
    ------
    FileNotFoundError
        For a missing experiment or configuration file.
    ValueError
        Naming the bad key, row, kind, seed or pair; or when a test or validation pair is repeated, is in more than one
        of test pairs, validation pairs and checkpoint-selection pairs (``env.eval_pairs``), or is possibly a
        training episode; or for ``on="validation"`` without validation pairs.
    """
    if on not in ON:
        raise ValueError(f"on = {on!r} is not one of {', '.join(ON)}")
    path = Path(path)
    data = read_toml(path, "experiment file")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(map(repr, unknown)))}; valid keys: "
                         f"{', '.join(sorted(_TOP_KEYS))}")
    config, seed_list = _config_path(data, path), _seeds(data, seeds)
    test_pairs = _pairs(data, "test_pairs", "held-out episodes")
    validation_pairs = _pairs(data, "validation_pairs", "where configurations are chosen") if (
        "validation_pairs" in data) else []
    if on == "validation" and not validation_pairs:
        raise ValueError(f"--on validation: {path.name} has no validation_pairs; add a list of [scenario, seed] "
                         f"disjoint from test_pairs, env.eval_pairs and the training seeds")
    every_row = _table_rows(data, path, _budgets(data.get("budgets", []), "budgets"))
    row_specs = _selected_rows(every_row, path, rows)
    spec = ExperimentSpec(
        name=str(data.get("name", path.stem)), path=path, config=config,
        overrides=_str_list(data.get("set", []), "set"), ace_overrides=_str_list(data.get("ace_set", []), "ace_set"),
        cli_overrides=list(overrides), seeds=seed_list, test_pairs=test_pairs,
        test_max_steps=_int(data.get("test_max_steps", 0), "test_max_steps", 0),
        greedy_budget=_int(data.get("greedy_budget", 30), "greedy_budget", 2), rows=row_specs,
        description=str(data.get("description", "")), row_filter=list(rows) if rows is not None else None,
        seeds_replaced=seeds is not None, primaries=_primaries(data.get("primary", []), every_row),
        validation_pairs=validation_pairs, on=on, **_reporting(data, every_row))
    check_disjoint("test pair", test_pairs, "validation_pairs", validation_pairs, "configurations are chosen on them")
    for row, seed in spec.cells():
        cfg = spec.row_config(row, seed)
        check_held_out(test_pairs, validation_pairs, row.name, row.trains, cfg, on)
        if row.threshold is not None and row.threshold < cfg.env.threshold:
            raise ValueError(f"deploy_threshold {row.threshold:g} (row {row.train_name!r}) is below its env.threshold "
                             f"{cfg.env.threshold:g}: the policy would decide in states it never trained in; valid: "
                             f"[{cfg.env.threshold:g}, 5]")
    return spec


def _reporting(data: dict[str, Any], rows: list[RowSpec]) -> dict[str, Any]:
    """The file's ``score``, ``holm``, ``reward_vs``, ``paper_note`` and ``cluster``, checked (ValueError naming the
    key)."""
    score = data.get("score", False)
    if not isinstance(score, bool):
        raise ValueError(f"score = {score!r} must be true or false")
    holm = data.get("holm", ["survival"])
    if (not isinstance(holm, list) or not holm or holm[0] != "survival" or len(set(holm)) != len(holm)
            or not set(holm) <= {"survival", "reward", "score"}):
        raise ValueError(f"holm = {holm!r} must be [\"survival\"], optionally followed by \"reward\" and/or "
                         f"\"score\" (the metrics whose primary differences form the Holm family)")
    if "score" in holm and not score:
        raise ValueError("holm names \"score\" but the file has no score = true")
    raw = data.get("reward_vs", [])
    named = _primaries(raw, rows, key="reward_vs", shorthands=False)
    if len(named) != len(raw):
        raise ValueError(f"reward_vs = {raw!r} names a pair of rows twice")
    note = data.get("paper_note", "")
    if not isinstance(note, str):
        raise ValueError(f"paper_note = {note!r} must be a string")
    cluster = data.get("cluster", "pair")
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster = {cluster!r} must be one of {CLUSTERS} (what the intervals resample)")
    return {"score": score, "holm": tuple(holm), "reward_vs": named, "paper_note": note, "cluster": cluster}


def _config_path(data: dict[str, Any], path: Path) -> Path | None:
    """The file's ``config``, relative to the experiment file (None when it names none)."""
    if "config" not in data:
        return None
    if not isinstance(data["config"], str):
        raise ValueError(f"config = {data['config']!r} must be a path string")
    config = Path(data["config"])
    config = config if config.is_absolute() else (path.parent / config)
    if not config.is_file():
        raise FileNotFoundError(f"config = {data['config']!r}: {config} does not exist (paths are relative to "
                                f"the experiment file)")
    return config


def _seeds(data: dict[str, Any], seeds: Sequence[int] | None) -> list[int]:
    seed_list = list(seeds) if seeds is not None else data.get("seeds", [0])
    if not isinstance(seed_list, list) or not seed_list:
        raise ValueError(f"seeds = {seed_list!r} must be a non-empty list of integers >= 0")
    seed_list = [_int(s, "seeds[]", 0) for s in seed_list]
    if len(set(seed_list)) != len(seed_list):
        raise ValueError(f"seeds = {seed_list!r} repeats a seed")
    return seed_list


def _pairs(data: dict[str, Any], key: str, what: str) -> list[tuple[int, int]]:
    """The file's ``key`` (test or validation pairs): a non-empty list of distinct [scenario, seed]."""
    pairs = data.get(key)
    if (not isinstance(pairs, list) or not pairs
            or not all(isinstance(p, list) and len(p) == 2 for p in pairs)):
        raise ValueError(f"{key} = {pairs!r} must be a non-empty list of [scenario, seed] ({what})")
    out = [(_int(s, f"{key}[][0]", 0), _int(k, f"{key}[][1]", 0)) for s, k in pairs]
    repeated = sorted({p for p in out if out.count(p) > 1})
    if repeated:
        noun = "test pair(s)" if key == "test_pairs" else f"{key}"
        raise ValueError(f"{noun} {pair_list(repeated)} appear more than once: each episode counts once in the "
                         f"intervals")
    return out


def _table_rows(data: dict[str, Any], path: Path, budgets: list[int]) -> list[RowSpec]:
    """The table rows of the file's ``[[rows]]``, ``budgets`` (the file's: ``budgets``) and ``deploy_topk``
    expanded."""
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ValueError(f"{path}: no [[rows]]: give at least one row (kinds: {', '.join(ROW_KINDS)})")
    row_specs: list[RowSpec] = []
    train_ids: list[str] = []
    for i, raw in enumerate(raw_rows):
        made = _file_row(raw, f"rows[{i}]", budgets)
        train_ids.append(made[0].train_id)
        row_specs += made
    every = train_ids + [r.id for r in row_specs if r.id != r.train_id]
    dupes = sorted({i for i in every if every.count(i) > 1})
    if dupes:
        raise ValueError(f"row id(s) {', '.join(dupes)} appear more than once: give each row a distinct id")
    return row_specs


def _selected_rows(row_specs: list[RowSpec], path: Path, rows: Sequence[str] | None) -> list[RowSpec]:
    """The rows named by ``rows`` (a training's id keeps every row made from it), in the file's order."""
    if rows is None:
        return row_specs
    ids, train_ids = [r.id for r in row_specs], [r.train_id for r in row_specs]
    missing = [r for r in rows if r not in ids and r not in train_ids]
    if missing:
        known = list(dict.fromkeys([*train_ids, *ids]))
        raise ValueError(f"unknown row(s) {', '.join(map(repr, missing))}; rows of {path.name}: {', '.join(known)}")
    return [r for r in row_specs if r.id in set(rows) or r.train_id in set(rows)]


def _primaries(raw: Any, rows: list[RowSpec], key: str = "primary", shorthands: bool = True) -> list[Primary]:
    """The file's ``primary`` list (or another list of ``[A, B]`` rows: ``key``) as (A, B) table rows, shorthands
    expanded (when ``shorthands``), repeats dropped (see the module docstring); ValueError naming an unknown row and
    listing the valid names."""
    if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(n, str) for n in p)
                                            for p in raw):
        raise ValueError(f"{key} = {raw!r} must be a list of [A, B] row names, e.g. "
                         f"[[\"ACE (policy alone)\", \"SAC-only (policy alone)\"]]")
    by_key = {name: row for row in rows for name in (row.name, row.id)}
    groups = {EACH_TRAINED: [r for r in rows if r.trains], EACH_TRAINED_ALONE: [r for r in rows if r.topk == 0]} \
        if shorthands else {}

    def resolve(name: str, where: str) -> list[RowSpec]:
        if name in groups:
            if not groups[name]:
                raise ValueError(f"{where} = {name!r} names no row: the file has no such training rows")
            return groups[name]
        if name not in by_key:
            valid = ", ".join([*(repr(r.name) for r in rows), *map(repr, groups)])
            raise ValueError(f"{where}: unknown row {name!r}; valid names (or a row's id): {valid}")
        return [by_key[name]]

    out: dict[tuple[str, str], Primary] = {}
    for i, (a_name, b_name) in enumerate(raw):
        if a_name in groups and b_name in groups:
            raise ValueError(f"{key}[{i}] = [{a_name!r}, {b_name!r}]: at most one side may name several rows")
        pairs = [(a, b) for a in resolve(a_name, f"{key}[{i}][0]") for b in resolve(b_name, f"{key}[{i}][1]")
                 if a.id != b.id]
        if not pairs:
            raise ValueError(f"{key}[{i}] = [{a_name!r}, {b_name!r}] compares a row with itself")
        for a, b in pairs:
            out.setdefault((a.id, b.id), Primary(a.id, b.id, a.name, b.name))
    return list(out.values())


def _file_row(raw: dict[str, Any], where: str, file_budgets: list[int]) -> list[RowSpec]:
    """The table rows of one ``[[rows]]`` entry, checked."""
    bad = set(raw) - _ROW_KEYS
    if bad:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(map(repr, bad)))}; valid keys: "
                         f"{', '.join(sorted(_ROW_KEYS))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}.name = {name!r} must be a non-empty string")
    kind = raw.get("kind")
    if kind in RENAMED_KINDS:
        also = " ('expert-guided' for a row with train.tutor_steps > 0)" if kind == "sac_only" else ""
        raise ValueError(f"{where}.kind = {kind!r} (row {name!r}) is now spelled {RENAMED_KINDS[kind]!r}{also}")
    if kind not in ROW_KINDS:
        raise ValueError(f"{where}.kind = {kind!r} (row {name!r}) is not one of {', '.join(ROW_KINDS)}")
    row_id = raw.get("id", _slug(name))
    if not isinstance(row_id, str) or not _ID.match(row_id):
        raise ValueError(f"{where}.id = {row_id!r} must match {_ID.pattern}")
    if "ppo" in raw and kind != "maskable-ppo":
        raise ValueError(f"{where}.ppo (row {name!r}): kind {kind!r} is not maskable-ppo; the ppo table sets "
                         f"MaskablePPO's hyperparameters")
    ppo = PPOSettings.from_table(raw.get("ppo", {}), f"{where} (row {name!r})") if kind == "maskable-ppo" else None
    return deployed_rows(row_id, name, kind, _str_list(raw.get("set", []), f"{where}.set"), raw.get("deploy_topk"),
                         where, ppo, _row_budgets(raw, kind, name, where, file_budgets), raw.get("deploy_shortlist"),
                         raw.get("deploy_among"), raw.get("deploy_sure"), raw.get("deploy_threshold"))
