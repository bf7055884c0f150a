"""Overrides that make a training run tiny and fast: the 14-substation sandbox, small networks, short episodes.

Shared by the tests that train (test_train, test_experiment, test_report, test_llm_actor); each appends what it needs
(later overrides win).
"""

TINY = [
    "env.name=l2rpn_case14_sandbox", "env.train_scenarios=[0, 1]", "env.eval_pairs=[[2, 0]]",
    "env.threshold=0.5", "env.eval_max_steps=40", "env.max_episode_steps=120",
    "sac.hidden=[32]", "sac.embed_dim=8", "sac.batch_size=16",
    "replay.rl_capacity=2000", "replay.validated_capacity=10",
    "train.learning_starts=16", "train.checkpoint_every=100", "train.eval_every=150", "train.torch_threads=1",
    "log.progress=false", "log.log_every=50",
]
