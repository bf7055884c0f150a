"""Configuration: a tree of dataclasses, one documented default per field, loaded from TOML and ``--set`` overrides.

Every field carries its documentation as a string literal right below it (shown by ``ace-hybrid train --help-config``).
An unknown key or a value of the wrong type fails at start-up with a ``ValueError`` naming it; each section's
``validate`` checks ranges.

One module per section (``env``: ``[env]`` and ``[reward]``; ``replay``; ``train``: ``[train]`` and ``[log]``;
``sac``; ``llm``; ``ace``), :mod:`~ace_hybrid.config.root` for the whole tree (:class:`Config`) and
:mod:`~ace_hybrid.config.loading` for reading it. Import the names from here: ``from ace_hybrid.config import
Config, load_config``.
"""

from __future__ import annotations

from ace_hybrid.config.ace import ACTOR_RANKERS, QUEUE_OVERFLOW, ACEConfig
from ace_hybrid.config.env import EnvConfig, RewardConfig, parse_action_set
from ace_hybrid.config.llm import BACKENDS, LLMConfig
from ace_hybrid.config.loading import (ADDED, RENAMED, config_from_dict, describe_fields, load_config,
                                       parse_override, read_toml, renamed_keys, without_added_defaults)
from ace_hybrid.config.replay import ReplayConfig
from ace_hybrid.config.root import Config
from ace_hybrid.config.sac import HEADS, SACConfig
from ace_hybrid.config.train import EXECUTORS, MAX_WORKERS, LogConfig, TrainConfig

__all__ = [
    "ACTOR_RANKERS", "ADDED", "BACKENDS", "EXECUTORS", "HEADS", "MAX_WORKERS", "QUEUE_OVERFLOW", "RENAMED",
    "ACEConfig", "Config", "EnvConfig", "LLMConfig", "LogConfig", "ReplayConfig", "RewardConfig", "SACConfig",
    "TrainConfig",
    "config_from_dict", "describe_fields", "load_config", "parse_action_set", "parse_override", "read_toml",
    "renamed_keys", "without_added_defaults",
]
