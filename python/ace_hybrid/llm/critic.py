"""The value critic g_LLM: trajectory-level reward shaping by a language model (ACE, arXiv 2506.02522, Sec. 3.3).

Every few training episodes the critic reads stored trajectories that contain a key transition
(``|original_reward| > ace.r_key``: in practice the transition that lost the grid), judges the decisions that led
to the outcome by what followed them, and adjusts the rewards of chosen steps by one of ``{-2K, -K, +K, +2K}``
(``K = ace.critic_k``).
The adjusted reward replaces the stored one, so the credit of an outcome reaches the decisions that caused it --
an LLM-made eligibility trace (cf. TD(lambda)).

Selection (:meth:`ValueCritic.select`)
--------------------------------------
Rows of the RL partition are grouped by episode id and sorted by decision index. A trajectory is a candidate when it is
finished (its last stored row is done or truncated, so an episode still being written is never judged half-way),
has at least two decisions (a lone decision has no predecessor to pass credit to and no successor to be judged by),
contains a key transition, and has not been judged by this critic before. Candidates are ordered by their
original return (ties by episode id) and taken alternately from the bottom and the top: lowest, highest, second
lowest, ... The lowest returns are the collapses, where the critic can assign blame; the highest are the
trajectories that recovered from danger, where it can assign credit; alternating shows the critic both and keeps
SAC from seeing only negative shaping.

Which decisions are judged
--------------------------
Every decision but the last, most important first (``|reward|`` and change of max rho, as T_tau ranks them), at most
``steps_per_trajectory``. The last decision is never asked about: nothing followed it, so its reward already holds
all of its outcome (the collapse's -1, or the survival to the end) and the truthful answer, "unchanged", is not among
the options; shaping it would count the outcome twice.

Score mode (``critic_mode = "score"``, the default): one decision at a time, with what followed it
---------------------------------------------------------------------------------------------------
System message (the domain prefix P_r)::

    You are an experienced power grid operator. You judge one past decision of an automatic agent that controls
    a grid's topology, knowing what happened after it.

User message (:func:`critic_step_prompt`)::

    Decision [i] at step s: <action>. Its own reward: +0.01, highest line loading 97%.
    What followed: 3 more decisions earning -0.98 in total, highest loading 131%; the grid collapsed 3 decisions
    later.

    Looking at what followed, was this decision good or bad? Answer good or bad.

The answer is read from the first answer token's log-probabilities, ``m = log P(good | Good) - log P(bad | Bad)``
(one label token per side, so the length of an option string cannot decide), for three prompts in one batched
request (:meth:`LLMBackend.next_token_logprobs_many`): the real outcome (``m``) and two anchors that differ only in
what followed -- the best (``m_best``: as many later decisions, earning +1.00 plus 0.01 each, highest loading 80%,
the grid survived to the end) and the worst (``m_worst``: one more decision, -1.00, 120%, the grid collapsed). The
anchors calibrate the model's bias for this very decision and wording: ``q = (m - m_worst) / (m_best - m_worst)``
places the real outcome between them, and the option is its quarter: ``q < 1/4`` -> -2K, ``< 1/2`` -> -K,
``< 3/4`` -> +K, else +2K. A model that does not rank the best anchor above the worst (``m_best <= m_worst``) or
returns non-finite numbers has given no readable answer: the step is counted malformed and left unchanged. One call
per judged decision.

Why not the four option strings scored after the whole trajectory text (the 0.1 design): measured by
``benchmarks/bench_critic.py`` on 60 saved trajectories, SmolLM2-135M answered -2K for every step that way (205 of
205: no rank correlation with what followed, 5.8 s per call); with the options calibrated against a content-free
prompt it stayed within chance on probes of 16 and 26 trajectories (+0.03 and +0.19, intervals holding 0). Asked per
decision with what followed and anchored, its ratings rank the decisions by the discounted return that followed
them: Spearman +0.73 [+0.61, +0.82] on the same 60 trajectories (199 decisions; +0.72 on the 33 not used to choose
this design), as well as a rule reading the same sentence (+0.72), at 2.6 s per call
(``benchmarks/data/critic_results.md``).

Generate mode (``critic_mode = "generate"``)
--------------------------------------------
User message: the trajectory T_tau (:func:`~ace_hybrid.grid.text.describe_trajectory`: header with the number of
decisions, the total reward and whether the grid survived, then ``[i] step s: action -> reward, max rho`` lines for
the most important steps), followed by the meaning of the options -- ``+2K`` much better than its reward shows,
``+K`` better, ``-K`` worse (it contributed to later trouble), ``-2K`` much worse -- and one
:meth:`LLMBackend.generate` call (greedy) per trajectory asking for at most ``steps_per_trajectory`` lines
``[i]: <option>``, nothing else. The answer is parsed by :func:`parse_adjustments`; a malformed answer is counted and
ignored, never applied.

Application
-----------
``a_i = units_i * K``; when ``sum |a_i|`` exceeds ``ace.critic_max_total`` all ``a_i`` of the trajectory are
scaled down by the same factor. The new reward is ``original_reward_i + a_i`` (written with
:meth:`MixedReplayBuffer.update_rewards`), so judging never compounds on earlier shaping. Handles whose slot was
overwritten since :meth:`MixedReplayBuffer.rl_columns` are skipped by the buffer and counted as stale.

Budget and failures: ``may_call()`` is asked before every LLM call; when it says no, the round stops. An
:class:`LLMError` is counted and the trajectory skipped (it stays unjudged, so a later round may retry it);
nothing escapes :meth:`ValueCritic.run` but ValueError for a misconfigured critic.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ace_hybrid.grid.text import TrajectoryStep, describe_trajectory
from ace_hybrid.llm.backend import LLMBackend, LLMError

if TYPE_CHECKING:  # the config module imports torch (through sac); the critic itself does not need it
    from ace_hybrid.config import ACEConfig
    from ace_hybrid.replay import MixedReplayBuffer

__all__ = [
    "ANCHOR_BANDS",
    "OPTIONS",
    "CriticReport",
    "Judgement",
    "ValueCritic",
    "critic_generate_prompt",
    "critic_step_prompt",
    "parse_adjustments",
    "what_followed",
]

OPTIONS: dict[str, int] = {"-2K": -2, "-K": -1, "+K": 1, "+2K": 2}
"""The critic's answers and their value in units of K."""
ANCHOR_BANDS: tuple[float, float, float] = (0.25, 0.5, 0.75)
"""Score mode: where the real outcome sits between the worst and best anchors (q) -> -2K | -K | +K | +2K."""

_SYSTEM = (
    "You are an experienced power grid operator. You judge the decisions of an automatic agent that controls a "
    "grid's topology (line switching and substation bus assignments) when lines are overloaded. For a past "
    "trajectory you decide which decisions deserve more credit or more blame than their immediate reward gave them."
)
_MEANING = (
    "Options: +2K = much better than its reward shows; +K = better than its reward shows; "
    "-K = worse than its reward shows (it contributed to later trouble); -2K = much worse."
)
_REQUIRED = ("index", "episode", "decision", "action", "reward", "original_reward", "done", "truncated")
_SHOWN = re.compile(r"^\[(\d+)\] step ", re.MULTILINE)
_LINE = re.compile(r"\[(\d+)\][ \t]*:[ \t]*(-2K|-K|\+K|\+2K)")


def _critic_prompt(trajectory_text: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"Trajectory:\n{trajectory_text}\n\n{_MEANING}\n\n{question}"}]


_STEP_SYSTEM = (
    "You are an experienced power grid operator. You judge one past decision of an automatic agent that controls a "
    "grid's topology, knowing what happened after it."
)
_STEP_QUESTION = "Looking at what followed, was this decision good or bad? Answer good or bad."
_GOOD, _BAD = ("good", "Good"), ("bad", "Bad")


def what_followed(n_later: int, total: float, peak_rho: float, survived: bool | None) -> str:
    """What followed a decision, in one sentence: the later decisions, their summed reward, the highest loading seen
    at them, and how the trajectory ended (not said when ``survived`` is None). ``n_later >= 1``."""
    if n_later < 1:
        raise ValueError(f"n_later = {n_later} out of range [1, inf): the last decision has nothing after it")
    plural = "s" if n_later > 1 else ""
    text = (f"What followed: {n_later} more decision{plural} earning {total:+.2f} in total, highest loading "
            f"{100 * peak_rho:.0f}%")
    if survived is None:
        return text + "."
    return text + ("; the grid survived to the end." if survived else
                   f"; the grid collapsed {n_later} decision{plural} later.")


def critic_step_prompt(index: int, step: TrajectoryStep, followed: str) -> list[dict[str, str]]:
    """The score-mode prompt about decision ``index`` and what followed it (:func:`what_followed`)."""
    return [{"role": "system", "content": _STEP_SYSTEM},
            {"role": "user", "content": f"Decision [{index}] at step {step.step}: {step.action_text}. Its own reward: "
                                        f"{step.reward:+.2f}, highest line loading {100 * step.max_rho:.0f}%.\n"
                                        f"{followed}\n\n{_STEP_QUESTION}"}]


def critic_generate_prompt(trajectory_text: str, max_lines: int) -> list[dict[str, str]]:
    """The generate-mode prompt for a trajectory: at most ``max_lines`` lines ``[i]: option``."""
    return _critic_prompt(trajectory_text, f"Choose at most {max_lines} decisions whose reward should change, by "
                          "their index in brackets. Answer with one line per decision, exactly like\n[3]: -K\n"
                          "[7]: +2K\nand nothing else.")


def parse_adjustments(
    text: str, valid_indices: Sequence[int] | set[int], *, max_lines: int | None = None
) -> dict[int, int] | None:
    """Parse a generated answer strictly into ``{step index: units of K}``; None when it is malformed.

    Well-formed: one or more lines ``[i]: option`` where ``i`` is in ``valid_indices``, each index at most once,
    ``option`` one of ``-2K``, ``-K``, ``+K``, ``+2K``, and (when given) at most ``max_lines`` lines.
    Tolerated and nothing else: blank lines, whitespace at the start and end of a line, spaces or tabs around
    the colon. Anything more (prose, code fences, an unknown or repeated index, another option such as ``0``,
    ``K`` or ``+3K``, an empty answer) makes the whole answer malformed.

    Parameters
    ----------
    text : str
        The model's answer.
    valid_indices : collection of int
        The step indices the trajectory text showed.
    max_lines : int, optional
        The most adjustment lines accepted.

    Returns
    -------
    dict of int to int, or None
        Units in {-2, -1, 1, 2} by step index; None for a malformed answer.
    """
    valid = {int(i) for i in valid_indices}
    out: dict[int, int] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            return None
        index = int(m.group(1))
        if index not in valid or index in out or m.group(1) != str(index):  # "[03]" is not an index we showed
            return None
        out[index] = OPTIONS[m.group(2)]
    if not out or (max_lines is not None and len(out) > max_lines):
        return None
    return out


def _anchored_units(logprobs: np.ndarray) -> int | None:
    """Units of K from the (3, 4) label log-probabilities of the real, best and worst prompts (good, Good, bad,
    Bad); None when they are unreadable. See the module docstring (score mode)."""
    if logprobs.shape != (3, len(_GOOD) + len(_BAD)) or not np.all(np.isfinite(logprobs)):
        return None
    margin = (np.logaddexp.reduce(logprobs[:, : len(_GOOD)], axis=1)
              - np.logaddexp.reduce(logprobs[:, len(_GOOD) :], axis=1))
    real, best, worst = (float(m) for m in margin)
    if not best > worst:
        return None
    q = (real - worst) / (best - worst)
    return (-2, -1, 1, 2)[int(np.searchsorted(ANCHOR_BANDS, q, side="right"))]


class Judgement(NamedTuple):
    """The critic's answer about one trajectory.

    Attributes
    ----------
    units : dict of int to int
        Adjustment in units of K by position in the trajectory (empty when nothing is to be applied).
    calls : int
        LLM calls made (including one that failed).
    malformed : int
        Answers that were malformed and ignored.
    answered : bool
        At least one answer (well-formed or not) came back, so the trajectory counts as judged.
    error : LLMError or None
        The failure that stopped this trajectory (then ``units`` is empty).
    stopped : bool
        ``may_call()`` refused a call.
    """

    units: dict[int, int]
    calls: int
    malformed: int
    answered: bool
    error: LLMError | None
    stopped: bool


class CriticReport(NamedTuple):
    """What one :meth:`ValueCritic.run` round did.

    Attributes
    ----------
    trajectories : int
        Trajectories judged (an answer came back, well-formed or not).
    calls : int
        LLM calls made.
    malformed : int
        Malformed answers, ignored.
    errors : int
        :class:`LLMError` failures (each skipped its trajectory).
    adjusted_steps : int
        Stored rewards changed.
    total_abs_adjustment : float
        Sum of ``|a_i|`` over the changed rewards.
    seconds : float
        Wall-clock time of the round.
    stale : int
        Rows skipped because their slot was overwritten meanwhile.
    stopped : bool
        The budget (``may_call``) ended the round early.
    """

    trajectories: int
    calls: int
    malformed: int
    errors: int
    adjusted_steps: int
    total_abs_adjustment: float
    seconds: float
    stale: int = 0
    stopped: bool = False


class ValueCritic:
    """g_LLM: judges stored trajectories and shapes their rewards (see the module docstring).

    Parameters
    ----------
    backend : LLMBackend
    cfg : ACEConfig
        Uses ``r_key``, ``critic_k``, ``critic_max_total``, ``critic_mode`` and ``critic_trajectories``.
    describe_action : callable
        Catalog index -> text (T_a), e.g. ``ActionCatalog.describe``.
    max_rho : callable
        ``(n, D)`` float32 stored observations -> ``(n,)`` max line loading (the training loop passes
        ``lambda raw: raw[:, :n_line].max(1)``).
    steps_per_trajectory : int
        Score mode: key steps asked about per trajectory; generate mode: most answer lines accepted (>= 1).
    max_tokens : int
        Token budget of the trajectory text T_tau (>= 16).
    max_new_tokens : int
        Generate mode: the answer's token limit (>= 1).
    """

    def __init__(
        self,
        backend: LLMBackend,
        cfg: ACEConfig,
        *,
        describe_action: Callable[[int], str],
        max_rho: Callable[[np.ndarray], np.ndarray],
        steps_per_trajectory: int = 4,
        max_tokens: int = 400,
        max_new_tokens: int = 64,
    ) -> None:
        if cfg.critic_mode not in ("score", "generate"):
            raise ValueError(f"ace.critic_mode = {cfg.critic_mode!r} is invalid: must be 'score' or 'generate'")
        if not 0 < cfg.critic_k <= cfg.critic_max_total:
            raise ValueError(f"ace.critic_k = {cfg.critic_k} is invalid: must be in (0, ace.critic_max_total = "
                             f"{cfg.critic_max_total}]")
        if cfg.critic_trajectories < 1:
            raise ValueError(f"ace.critic_trajectories = {cfg.critic_trajectories} is invalid: must be >= 1")
        if steps_per_trajectory < 1:
            raise ValueError(f"steps_per_trajectory = {steps_per_trajectory} out of range [1, inf)")
        if max_tokens < 16:
            raise ValueError(f"max_tokens = {max_tokens} out of range [16, inf)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens = {max_new_tokens} out of range [1, inf)")
        self.backend = backend
        self.cfg = cfg
        self.describe_action = describe_action
        self.max_rho = max_rho
        self.steps_per_trajectory = int(steps_per_trajectory)
        self.max_tokens = int(max_tokens)
        self.max_new_tokens = int(max_new_tokens)
        self._judged: set[int] = set()

    # ------------------------------------------------------------------------------------------ state
    @property
    def judged_episodes(self) -> frozenset[int]:
        """Episode ids judged so far that are still in the buffer."""
        return frozenset(self._judged)

    def state_dict(self) -> dict[str, list[int]]:
        """JSON-able state: the judged episode ids."""
        return {"judged_episodes": sorted(self._judged)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (ValueError for anything else)."""
        episodes = state.get("judged_episodes") if isinstance(state, Mapping) else None
        if episodes is None or isinstance(episodes, (str, bytes)) or not all(
            isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in episodes
        ):
            raise ValueError(f"critic state = {state!r} is invalid: expected {{'judged_episodes': [int, ...]}}")
        self._judged = {int(e) for e in episodes}

    # -------------------------------------------------------------------------------------- selection
    def select(self, columns: Mapping[str, np.ndarray]) -> list[npt.NDArray[np.int64]]:
        """Choose the trajectories to judge this round.

        Parameters
        ----------
        columns : dict of (n,) arrays
            :meth:`MixedReplayBuffer.rl_columns`: ``index``, ``episode``, ``decision``, ``action``, ``reward``,
            ``original_reward``, ``done``, ``truncated``.

        Returns
        -------
        list of (m,) int64
            Row positions into ``columns`` of each chosen trajectory (two decisions or more), in step order; at most
            ``cfg.critic_trajectories`` of them, alternately the lowest and the highest original return.
            Judged episodes that left the buffer are forgotten here (episode ids are never reused).
        """
        missing = [k for k in _REQUIRED if k not in columns]
        if missing:
            raise ValueError(f"columns lacks {missing}; expected the keys of MixedReplayBuffer.rl_columns()")
        n = len(columns["index"])
        if any(len(columns[k]) != n for k in _REQUIRED):
            raise ValueError(f"columns have lengths {[len(columns[k]) for k in _REQUIRED]}; expected all equal")
        episode = np.asarray(columns["episode"], dtype=np.int64)
        step = np.asarray(columns["decision"], dtype=np.int64)
        original = np.asarray(columns["original_reward"], dtype=np.float64)
        ended = np.asarray(columns["done"], dtype=bool) | np.asarray(columns["truncated"], dtype=bool)
        order = np.lexsort((step, episode))
        sorted_episode = episode[order]
        groups = np.split(order, np.flatnonzero(sorted_episode[1:] != sorted_episode[:-1]) + 1) if n else []
        self._judged &= {int(e) for e in np.unique(episode)}
        candidates: list[tuple[float, int, npt.NDArray[np.int64]]] = []
        for rows in groups:
            ep = int(episode[rows[0]])
            if ep in self._judged or not ended[rows[-1]] or len(rows) < 2:
                continue
            if not np.any(np.abs(original[rows]) > self.cfg.r_key):
                continue
            candidates.append((float(original[rows].sum()), ep, rows.astype(np.int64)))
        candidates.sort(key=lambda c: (c[0], c[1]))
        chosen: list[npt.NDArray[np.int64]] = []
        lo, hi = 0, len(candidates) - 1
        while lo <= hi and len(chosen) < self.cfg.critic_trajectories:
            if len(chosen) % 2 == 0:
                chosen.append(candidates[lo][2])
                lo += 1
            else:
                chosen.append(candidates[hi][2])
                hi -= 1
        return chosen

    # ---------------------------------------------------------------------------------------- judging
    def judge(
        self,
        steps: Sequence[TrajectoryStep],
        *,
        survived: bool | None = None,
        may_call: Callable[[], bool] = lambda: True,
    ) -> Judgement:
        """Ask the LLM about one trajectory (never raises :class:`LLMError`).

        Parameters
        ----------
        steps : sequence of TrajectoryStep
            The trajectory in time order (rewards as originally stored).
        survived : bool, optional
            Whether the grid survived the trajectory (said in T_tau, and in score mode in what followed each step).
        may_call : callable
            Asked before every LLM call; False stops.

        Returns
        -------
        Judgement
            ``units`` by position in ``steps``.
        """
        if len(steps) == 0:
            raise ValueError("steps is empty: a trajectory has at least one decision")
        if self.cfg.critic_mode == "generate":
            text = describe_trajectory(steps, max_tokens=self.max_tokens, survived=survived)
            return self._judge_generate(text, [int(i) for i in _SHOWN.findall(text)], may_call)
        return self._judge_score(steps, survived, may_call)

    def _judge_generate(self, text: str, shown: list[int], may_call: Callable[[], bool]) -> Judgement:
        if not may_call():
            return Judgement({}, 0, 0, False, None, True)
        prompt = critic_generate_prompt(text, self.steps_per_trajectory)
        try:
            answer = self.backend.generate(prompt, max_new_tokens=self.max_new_tokens, temperature=0.0)
        except LLMError as exc:
            return Judgement({}, 1, 0, False, exc, False)
        units = parse_adjustments(answer.text, shown, max_lines=self.steps_per_trajectory)
        if units is None:
            return Judgement({}, 1, 1, True, None, False)
        return Judgement(units, 1, 0, True, None, False)

    def asked(self, steps: Sequence[TrajectoryStep]) -> list[int]:
        """Score mode: the positions asked about, in asking order -- every decision but the last, most important
        first (``|reward|`` and change of max rho, as T_tau ranks them), at most ``steps_per_trajectory``."""
        rewards = np.array([s.reward for s in steps], dtype=np.float64)
        rhos = np.array([s.max_rho for s in steps], dtype=np.float64)
        change = np.abs(np.diff(rhos, prepend=rhos[0]))
        score = np.abs(rewards) / (np.abs(rewards).max() + 1e-9) + change / (change.max() + 1e-9)
        ranked = [i for i in np.lexsort((np.arange(len(steps)), -score)).tolist() if i < len(steps) - 1]
        return ranked[: self.steps_per_trajectory]

    def _judge_score(self, steps: Sequence[TrajectoryStep], survived: bool | None,
                     may_call: Callable[[], bool]) -> Judgement:
        units: dict[int, int] = {}
        calls = malformed = 0
        for i in self.asked(steps):
            if not may_call():
                return Judgement(units, calls, malformed, calls > 0, None, True)
            later = steps[i + 1 :]
            n = len(later)
            real = what_followed(n, sum(s.reward for s in later), max(s.max_rho for s in later), survived)
            best = what_followed(n, 0.01 * n + 1.0, 0.8, True)
            worst = what_followed(1, -1.0, 1.2, False)
            prompts = [critic_step_prompt(i, steps[i], f) for f in (real, best, worst)]
            calls += 1
            try:
                lp = np.asarray(self.backend.next_token_logprobs_many(prompts, [*_GOOD, *_BAD]), dtype=np.float64)
            except LLMError as exc:
                return Judgement({}, calls, malformed, False, exc, False)
            answer = _anchored_units(lp)
            if answer is None:
                malformed += 1  # unreadable (non-finite, or the best anchor not above the worst): leave this step
                continue
            units[i] = answer
        return Judgement(units, calls, malformed, calls > 0, None, False)

    # ----------------------------------------------------------------------------------------- a round
    def adjustments(self, units: Mapping[int, int]) -> dict[int, float]:
        """``{position: a_i}`` with ``a_i = units_i K``, scaled down together so that ``sum |a_i| <= max_total``."""
        k, bound = float(self.cfg.critic_k), float(self.cfg.critic_max_total)
        a = {i: u * k for i, u in units.items()}
        total = sum(abs(v) for v in a.values())
        if total > bound:
            a = {i: v * (bound / total) for i, v in a.items()}
        return a

    def run(self, replay: MixedReplayBuffer, *, may_call: Callable[[], bool]) -> CriticReport:
        """One critic round: select, judge and shape (see the module docstring).

        Parameters
        ----------
        replay : MixedReplayBuffer
        may_call : callable
            The LLM-call budget: asked before every call; False ends the round.

        Returns
        -------
        CriticReport
        """
        started = time.perf_counter()
        columns = replay.rl_columns()
        judged = calls = malformed = errors = adjusted = stale = 0
        total_abs = 0.0
        stopped = False
        for rows in self.select(columns):
            handles = np.asarray(columns["index"][rows], dtype=np.int64)
            try:
                obs = replay.get(handles).obs
            except IndexError:  # overwritten since rl_columns (an actor thread is adding): not ours to judge
                stale += len(rows)
                continue
            rho = np.asarray(self.max_rho(obs), dtype=np.float64)
            if rho.shape != (len(rows),):
                raise ValueError(f"max_rho returned shape {rho.shape}; expected ({len(rows)},)")
            original = np.asarray(columns["original_reward"][rows], dtype=np.float64)
            steps = [
                TrajectoryStep(int(columns["decision"][r]), self.describe_action(int(columns["action"][r])),
                               float(original[j]), float(rho[j]))
                for j, r in enumerate(rows)
            ]
            survived = not bool(columns["done"][rows[-1]])
            result = self.judge(steps, survived=survived, may_call=may_call)
            calls += result.calls
            malformed += result.malformed
            if result.error is not None:
                errors += 1
                continue
            for pos, a in self.adjustments(result.units).items():
                # One handle at a time so that a stale one is known exactly and left out of the totals.
                applied = replay.update_rewards(handles[pos : pos + 1], np.array([original[pos] + a]))
                if applied:
                    adjusted += 1
                    total_abs += abs(a)
                else:
                    stale += 1
            if result.answered:
                judged += 1
                self._judged.add(int(columns["episode"][rows[0]]))
            if result.stopped:
                stopped = True
                break
        return CriticReport(judged, calls, malformed, errors, adjusted, total_abs,
                            time.perf_counter() - started, stale, stopped)
