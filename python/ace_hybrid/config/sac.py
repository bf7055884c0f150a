"""Section ``[sac]``: the hyper-parameters of the discrete SAC agent."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ace_hybrid.config.checks import is_real

__all__ = ["HEADS", "SACConfig"]

HEADS = ("linear", "lowrank")
"""Valid values of :attr:`SACConfig.head`."""


@dataclass
class SACConfig:
    """Hyper-parameters of :class:`DiscreteSAC` (defaults sized for ~67k actions on a CPU)."""

    hidden: tuple[int, ...] = (256, 256)
    """Widths of the MLP trunk of each network (actor, Q1, Q2), at least one layer, each >= 1."""
    head: str = "lowrank"
    """Output head over the actions: "lowrank" (h(s) . e(a) + b(a), fast at 67k actions) or "linear"."""
    embed_dim: int = 64
    """Width of the low-rank head: dimension of h(s) and of the action embeddings e(a) (>= 1)."""
    lr_actor: float = 3e-4
    """Adam learning rate of the policy network (> 0)."""
    lr_critic: float = 3e-4
    """Adam learning rate of the twin Q networks (> 0)."""
    lr_alpha: float = 3e-4
    """Adam learning rate of log(alpha), the temperature (> 0)."""
    gamma: float = 0.99
    """Discount per decision (per stored transition), in [0, 1]: the agent decides only in danger states and a
    transition spans every environment step until the next decision, so gamma applies once per transition."""
    polyak: float = 0.995
    """Target-network averaging after each update: target <- polyak * target + (1 - polyak) * online; [0, 1]."""
    init_alpha: float = 0.2
    """Initial temperature alpha (> 0); then tuned automatically towards the target entropy."""
    max_alpha: float = math.inf
    """The temperature never rises above it (>= init_alpha; inf: no bound). Where the policy's entropy stays below
    its target the tuning raises alpha without end, as in the budget curve's runs; bounded, the policy's entropy
    collapsed and the critics diverged, and survival did not change (experiments/temperature_bound.toml,
    docs/results.md)."""
    critic_layer_norm: bool = False
    """A LayerNorm after each hidden layer of the critics (and their targets), before its ReLU, as high
    update-to-data learners use against diverging critics (Ball et al. 2023, RLPD). Measured here
    (experiments/critic_divergence.toml): it slowed the divergence with the temperature bounded, did not stop it,
    and did not change survival; off by default."""
    anchor_weight: float = 0.0
    """Weight of KL(pi_start(. | s) || pi(. | s)), averaged over each batch's states, added to the actor's loss:
    pi_start is the actor as the run started (train.init_policy's junior), held fixed, so RL moves the policy away
    from the junior only where its critics earn it (behaviour-regularised RL; the warm start alone lost the
    junior's gain, docs/results.md). Dense over the legal actions (B x n per update). 0 (default): off; > 0 needs
    train.init_policy."""
    policy_average: float = 0.0
    """Evaluations, kept checkpoints and deployment act with a Polyak average of the actor, updated after each
    update as average <- d * average + (1 - d) * actor with d = min(policy_average, (1 + n) / (10 + n)) at update
    n (the warm-up keeps early averages off the random start), where exploration and the updates keep the actor
    itself: the policy a run keeps then moves less between evaluations than the actor does (8.7 survival points
    between consecutive evaluations, tools/checkpoint_selection.py). In [0, 1); 0 (default): off."""
    target_entropy_ratio: float = 0.5
    """Target entropy per state = ratio * log(number of legal actions), ratio in [0, 1] (see the module doc)."""
    grad_clip: float = 10.0
    """Maximum global L2 norm of each optimiser's gradient (actor, critics, alpha), > 0 (inf: no clipping)."""
    batch_size: int = 256
    """Transitions per update, as sampled by the training loop from the replay buffer (>= 1)."""
    prior_action: int = 0
    """Action given the initial probability prior_prob (ace_hybrid's catalogs: 0, do nothing); in [0, n)."""
    prior_prob: float = 0.0
    """Initial policy probability of prior_action, in [0, 1) (0: a uniform initial policy). On power grids most
    random topology changes hurt, so starting from "mostly do nothing" keeps early episodes alive."""
    policy_samples: int = 0
    """Actions drawn per state to estimate the policy loss's gradient (an integer >= 2), or 0 for the exact
    expectation over all legal actions. Sampled: unbiased (score function, leave-one-out baseline), stochastic."""
    device: str = "cpu"
    """Torch device of the networks and the update: "cpu", "cuda" or "auto" (cuda when available, else cpu)."""

    def validate(self) -> None:
        """Raises ValueError naming the first invalid field, its value and the valid range."""

        def bad(name: str, valid: str) -> ValueError:
            return ValueError(f"SACConfig.{name} = {getattr(self, name)!r} is invalid: expected {valid}")

        hidden = self.hidden
        if (not isinstance(hidden, (tuple, list)) or len(hidden) == 0
                or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1 for h in hidden)):
            raise bad("hidden", "a non-empty tuple of integers >= 1")
        if self.head not in HEADS:
            raise bad("head", f"one of {HEADS}")
        for name in ("embed_dim", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise bad(name, "an integer in [1, inf)")
        for name in ("lr_actor", "lr_critic", "lr_alpha", "init_alpha"):
            v = getattr(self, name)
            if not is_real(v) or not (0.0 < v < math.inf):
                raise bad(name, "a finite number in (0, inf)")
        if isinstance(self.prior_action, bool) or not isinstance(self.prior_action, numbers.Integral) \
                or self.prior_action < 0:
            raise bad("prior_action", "an integer in [0, n_actions)")
        if not is_real(self.prior_prob) or not 0.0 <= self.prior_prob < 1.0:
            raise bad("prior_prob", "a number in [0, 1)")
        if not is_real(self.max_alpha) or not self.max_alpha >= self.init_alpha:
            raise bad("max_alpha", f"a number in [init_alpha = {self.init_alpha}, inf]")
        for name in ("gamma", "polyak", "target_entropy_ratio"):
            v = getattr(self, name)
            if not is_real(v) or not (0.0 <= v <= 1.0):
                raise bad(name, "a number in [0, 1]")
        if not is_real(self.policy_average) or not 0.0 <= self.policy_average < 1.0:
            raise bad("policy_average", "a number in [0, 1)")
        if not is_real(self.anchor_weight) or not 0.0 <= self.anchor_weight <= 1000.0:
            raise bad("anchor_weight", "a number in [0, 1000]")
        if not is_real(self.grad_clip) or not self.grad_clip > 0.0:
            raise bad("grad_clip", "a number in (0, inf]")
        if isinstance(self.policy_samples, bool) or not isinstance(self.policy_samples, numbers.Integral) \
                or self.policy_samples < 0 or self.policy_samples == 1:
            raise bad("policy_samples", "0 (exact) or an integer in [2, inf)")
        if not isinstance(self.critic_layer_norm, bool):
            raise bad("critic_layer_norm", "true or false")
        if self.device not in ("cpu", "cuda", "auto"):
            raise bad("device", "one of ('cpu', 'cuda', 'auto')")
