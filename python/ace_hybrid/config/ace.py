"""Section ``[ace]``: ACE's LLM roles in the loop (policy actor, value critic, co-evolution) and the LLM worker."""

from __future__ import annotations

from dataclasses import dataclass

from ace_hybrid.config.checks import check

__all__ = ["ACTOR_RANKERS", "QUEUE_OVERFLOW", "ACEConfig"]

ACTOR_RANKERS = ("llm", "judge", "lac", "sim", "q", "random")
"""Valid values of :attr:`ACEConfig.ranker`."""

QUEUE_OVERFLOW = ("skip", "drop_oldest")
"""Valid values of :attr:`ACEConfig.queue_overflow`."""


@dataclass
class ACEConfig:
    """ACE's LLM roles in the loop (arXiv 2506.02522): policy actor, value critic, co-evolution. They run only when
    ``llm.backend`` is not "none"; each can be switched off alone (the ablations).

    A transition is *bad*, and goes to the actor, when something really went wrong inside it: a line reached
    ``bad_rho`` (an overload, 100% by default) at one of its steps, or the grid collapsed, or its reward is below
    ``r_bar``. Reward scale (see :class:`RewardConfig`): a transition that keeps the grid out of danger for k steps
    earns about ``0.01 k``; one that ends in a blackout earns about -1; so ``r_bar = 0`` adds nothing to the blackout
    rule and ``r_bar = 0.3`` would add every transition followed by renewed danger within ~25 steps.
    """

    actor: bool = True
    """Policy actor f_LLM: re-propose actions for bad transitions (r < r_bar), validated in a simulator copy."""
    r_bar: float = 0.0
    """A completed transition with reward below r_bar is bad (see the class note on scale)."""
    bad_rho: float = 1.0
    """A completed transition in which some line's loading reached bad_rho is bad (1.0: an overload)."""
    candidates: int = 8
    """Legal candidates shown to the actor: half from the SAC critic's best Q-values, half from the greedy heuristic."""
    max_rounds: int = 5
    """Rounds of propose -> validate per bad transition; a failed attempt is put in the next round's prompt."""
    ranker: str = "sim"
    """How the actor picks among candidates (shown in a seeded shuffled order): "llm" (the model answers with a
    candidate's letter, read from the letters' log-probabilities), "judge" (each candidate judged alone, GOOD or BAD,
    the best log P(GOOD) - log P(BAD) chosen; co-evolution then teaches it the simulator's verdicts), "lac" (prior x
    exp(lac_alpha Q_LLM)), or the controls "sim" (lowest simulated max loading), "q" (the SAC critic's best) and
    "random". The default is what measures best in benchmarks/bench_actor.py (docs/ace.md: the embedded model against
    these controls); point "llm" or "judge" at a stronger model and measure it there."""
    show_effects: bool = True
    """Show each candidate's simulated one-step effect (max loading, lines over the limit, lines off) in the LLM's
    prompt ("reading"); false shows the state and the candidates' texts only ("knowledge of the grid")."""
    effects_vs_played: bool = False
    """With show_effects, each effect also says, in words, how many points of max loading it lies below or above what
    was played ("12 points below what was played"): the judge's question then reads off one word, not a comparison
    of two numbers the embedded model never learnt to make (docs/ace.md)."""
    lac_alpha: float = 1.0
    """Critic weight of LAC when ranker = "lac" and for the LLM-only agent."""
    validation_steps: int = 48
    """Longest simulated continuation (safe rule after the proposal, until the next danger state) in validation."""
    min_improvement: float = 0.01
    """A proposal is accepted when its simulated reward exceeds the RL action's by at least this (0.01: about one more
    step survived), or when see min_rho_drop; never when it ends in a blackout the RL action avoided."""
    min_rho_drop: float = 0.05
    """... or when, with a reward no lower, the max loading where its simulated segment ends is lower by at least
    this (segments often end at the next step, in danger whatever was played: the loading tells them apart)."""
    do_nothing_first: bool = False
    """Before the ranker's rounds, validate doing nothing against the RL action (when that acted) and accept it
    when it does better: the imitation term then also learns where doing nothing was right, which the candidates'
    lowest simulated loading rarely picks (one more simulated segment per bad transition; not an LLM call)."""
    max_llm_calls: int = 400
    """Budget of LLM calls per run (actor + critic; co-evolution's probe calls are counted apart); 0: unlimited."""
    critic_share: float = 0.25
    """Share of max_llm_calls reserved for the value critic when it is on (the actor gets the rest)."""
    pace_budget: bool = True
    """Spread the actor's calls over the run: by environment step t of T, at most max_llm_calls * (0.1 + 0.9 t / T)
    calls are spent, so the early, random policy's many bad transitions do not use it all up."""
    critic: bool = True
    """Value critic g_LLM: trajectory-level reward shaping in {-2K, -K, +K, +2K}."""
    critic_start: int = 2_000
    """Environment steps before the critic switches on."""
    critic_every: int = 2
    """Run the critic after every this many finished training episodes."""
    critic_trajectories: int = 2
    """Trajectories (stored episodes) judged per critic round, chosen by reward among those with key transitions."""
    r_key: float = 0.5
    """A transition with |r| > r_key is a key transition."""
    critic_k: float = 0.02
    """K: the unit of the critic's per-step adjustment."""
    critic_max_total: float = 0.1
    """Bound on the summed |adjustment| per trajectory (larger sums are scaled down)."""
    critic_mode: str = "score"
    """How the critic answers: each key step's adjustment chosen by scoring the four options, always well-formed
    ("score"), or one generated answer per trajectory parsed strictly, malformed answers counted and ignored
    ("generate")."""
    coevolve: bool = True
    """Co-evolution: LoRA fine-tune the LLM on its best accepted refinements (backends that support it), when the
    actor's ranker asks the LLM ("llm", "judge", "lac"): with "sim", "q" or "random" a round would teach the LLM a
    question it is never asked, and co-evolution stays off (the summary says why)."""
    finetune_every: int = 100
    """Fine-tune after every this many accepted refinements (with the "judge" ranker: refinements with verdicts,
    accepted or not, as each teaches it)."""
    finetune_pairs: int = 64
    """Refinements per fine-tuning round: with the "llm" and "lac" rankers the accepted ones with the largest
    r_hat - r; with "judge", the most recent since the last round, accepted or not (their verdicts)."""
    sft_orders: int = 2
    """Each of a round's refinements is shown under this many orders of its candidates, the accepted candidate's
    letter cycling evenly over the positions: the pairs teach which candidate was right, never a letter."""
    probe_size: int = 8
    """Bad transitions set aside (never refined or trained on) to measure the LLM's first-choice acceptance before
    and after each fine-tuning round on identical problems (0: no probe)."""
    label_candidates: bool = False
    """After each refinement the ranker took part in, validate every candidate it was shown that no round tried (48
    simulated steps each, no LLM call), so the simulator labels them all: co-evolution's judge pairs then hold
    GOOD and BAD verdicts from every refinement, accepted or not, where the rounds alone leave mostly the one
    accepted candidate. The refinement itself is unchanged."""
    exam: str = ""
    """A labelled problem set (``benchmarks/data/coevolution_problems.json.gz``; :mod:`ace_hybrid.llm.exam`) whose
    held-out problems the co-evolving LLM is examined on before its first fine-tuning round and after every round:
    first-choice accuracy with its interval, beside the position-only controls and the simulation ranker, in the
    ``coevo/exam_*`` metrics. The problems come from episodes no run trains on. "" (default): no exam."""
    exam_size: int = 160
    """Problems of the exam (both grids of the set in their shares; one judged prompt per candidate each)."""
    async_llm: bool = True
    """Run the LLM's work (the actor's refinements, the critic's rounds, co-evolution's fine-tuning) on a worker
    thread behind a bounded queue, so acting and learning never wait for it; results enter the replay when they
    arrive, and the queue drains at the end of the run. False: every LLM call runs in the loop's thread, which waits
    for it (deterministic; slower)."""
    queue_size: int = 2
    """Bad transitions that may wait for the worker (async_llm); each holds an environment copy until it is run, and
    the run's end waits for them (the drain)."""
    queue_overflow: str = "skip"
    """When a bad transition finds the queue full: "skip" drops the new one, and while the queue is full the loop does
    not even copy the environment at its decisions (a copy costs it 10-40 ms); "drop_oldest" evicts the oldest waiting
    one (the freshest transitions are refined, at the price of a copy at every decision). Either way the dropped one
    is counted (llm/queue_dropped)."""
    worker_torch_threads: int = 1
    """Torch CPU threads of the LLM worker thread (async_llm; thread-local with OpenMP builds), leaving the other cores
    to the learner; 0: torch's default for a new thread (all cores)."""
    worker_nice: int = 19
    """How much lower the LLM worker thread's scheduling priority is than the loop's (Linux only, per thread; 0:
    the same): the learner gets the CPU first, the LLM what is left, and what it cannot keep up with is dropped.
    It matters only when the cores are oversubscribed (a free core runs the worker at full speed at any nice).
    Measured on 2 shared cores (load ~2.7), 3,000 steps of make run's configuration, one run each (no interval): at
    nice 5 the ACE loop took 47.9 s against SAC-only's 30.6 s (its updates and steps slowed by the worker); at nice
    19, 25.2 s. The price: with no free core the worker gets almost nothing (make run's --jobs 2: 19-22 LLM calls
    per ACE run, its results only in the final drain)."""

    def validate(self) -> None:
        check(-10.0 <= self.r_bar <= 10.0, "ace.r_bar", self.r_bar, "must be in [-10, 10]")
        check(2 <= self.candidates <= 26, "ace.candidates", self.candidates, "must be in [2, 26] (one letter each)")
        check(1 <= self.max_rounds <= 20, "ace.max_rounds", self.max_rounds, "must be in [1, 20]")
        check(isinstance(self.effects_vs_played, bool), "ace.effects_vs_played", self.effects_vs_played,
              "must be true or false")
        check(self.ranker != "score", "ace.ranker", self.ranker, "was renamed: use 'llm'")
        check(self.ranker in ACTOR_RANKERS, "ace.ranker", self.ranker, f"must be one of {ACTOR_RANKERS}")
        check(0.0 < self.bad_rho <= 5.0, "ace.bad_rho", self.bad_rho, "must be in (0, 5]")
        check(0.0 <= self.lac_alpha <= 100.0, "ace.lac_alpha", self.lac_alpha, "must be in [0, 100]")
        check(1 <= self.validation_steps <= 10_000, "ace.validation_steps", self.validation_steps,
               "must be in [1, 10000]")
        check(self.min_improvement >= 0, "ace.min_improvement", self.min_improvement, "must be >= 0")
        check(0 <= self.min_rho_drop <= 5, "ace.min_rho_drop", self.min_rho_drop, "must be in [0, 5]")
        check(self.max_llm_calls >= 0, "ace.max_llm_calls", self.max_llm_calls, "must be >= 0")
        check(0.0 <= self.critic_share <= 1.0, "ace.critic_share", self.critic_share, "must be in [0, 1]")
        check(self.critic_start >= 0, "ace.critic_start", self.critic_start, "must be >= 0")
        check(self.critic_every >= 1, "ace.critic_every", self.critic_every, "must be >= 1")
        check(1 <= self.critic_trajectories <= 1000, "ace.critic_trajectories", self.critic_trajectories,
               "must be in [1, 1000]")
        check(self.r_key >= 0, "ace.r_key", self.r_key, "must be >= 0")
        check(0 < self.critic_k <= 10, "ace.critic_k", self.critic_k, "must be in (0, 10]")
        check(self.critic_max_total >= self.critic_k, "ace.critic_max_total", self.critic_max_total,
               f"must be >= ace.critic_k = {self.critic_k}")
        check(self.critic_mode in ("score", "generate"), "ace.critic_mode", self.critic_mode,
               "must be 'score' or 'generate'")
        check(self.finetune_every >= 1, "ace.finetune_every", self.finetune_every, "must be >= 1")
        check(self.finetune_pairs >= 1, "ace.finetune_pairs", self.finetune_pairs, "must be >= 1")
        check(1 <= self.sft_orders <= 26, "ace.sft_orders", self.sft_orders, "must be in [1, 26]")
        check(0 <= self.probe_size <= 256, "ace.probe_size", self.probe_size, "must be in [0, 256]")
        check(10 <= self.exam_size <= 5000, "ace.exam_size", self.exam_size, "must be in [10, 5000]")
        check(1 <= self.queue_size <= 10_000, "ace.queue_size", self.queue_size, "must be in [1, 10000]")
        check(self.queue_overflow in QUEUE_OVERFLOW, "ace.queue_overflow", self.queue_overflow,
               f"must be one of {QUEUE_OVERFLOW}")
        check(0 <= self.worker_torch_threads <= 1024, "ace.worker_torch_threads", self.worker_torch_threads,
               "must be in [0, 1024]")
        check(0 <= self.worker_nice <= 19, "ace.worker_nice", self.worker_nice, "must be in [0, 19]")
