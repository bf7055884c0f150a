"""Configuration: defaults, TOML, overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
from ace_hybrid.config import Config, config_from_dict, describe_fields, load_config, parse_override, renamed_keys

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_validate_and_round_trip() -> None:
    cfg = load_config()
    assert cfg.env.threshold == 0.9
    assert config_from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_configs_load(path: Path) -> None:
    cfg = load_config(path)
    # <env>.toml trains SAC alone; ace_<env>.toml adds the LLM.
    assert cfg.env.name == path.stem.removeprefix("ace_")
    assert (cfg.llm.backend != "none") == path.stem.startswith("ace_")


def test_overrides_are_coerced_by_field_type() -> None:
    cfg = load_config(None, ["sac.lr_actor=1e-4", "train.total_env_steps=5_000", "log.tensorboard=false",
                             "env.eval_pairs=[[0, 5]]", "sac.hidden=[64, 64]"])
    assert cfg.sac.lr_actor == 1e-4 and cfg.train.total_env_steps == 5000 and cfg.log.tensorboard is False
    assert cfg.env.eval_pairs == [[0, 5]] and tuple(cfg.sac.hidden) == (64, 64)


@pytest.mark.parametrize(("override", "message"), [
    ("sac.nope=1", "unknown configuration key 'sac.nope'"),
    ("nope.x=1", "unknown configuration key 'nope'"),
    ("train.total_env_steps=many", "train.total_env_steps = 'many' is not a valid int"),
    ("env.threshold=-1", "env.threshold = -1.0 is invalid: must be in \\[0, 5\\]"),
    ("replay.alpha=2", "replay.alpha = 2.0 is invalid"),
    ("train", "must look like section.key=value"),
])
def test_bad_values_fail_at_start_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(None, [override])


def test_a_renamed_key_is_refused_naming_the_new_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'replay.llm_capacity' was renamed: use 'replay.validated_capacity'"):
        load_config(None, ["replay.llm_capacity=10"])
    old = tmp_path / "old.toml"
    old.write_text("[replay]\nllm_capacity = 10\n")
    with pytest.raises(ValueError, match="use 'replay.validated_capacity'"):
        load_config(old)


def test_a_configuration_saved_under_an_old_key_is_read_under_the_new_one() -> None:
    saved = load_config(None, ["replay.validated_capacity=123"]).to_dict()
    saved["replay"]["llm_capacity"] = saved["replay"].pop("validated_capacity")  # a checkpoint from before the rename
    assert config_from_dict(saved).replay.validated_capacity == 123
    assert "llm_capacity" in saved["replay"]  # the caller's dictionary is left as it was


def test_renamed_keys_move_both_ways_and_leave_the_input_alone() -> None:
    saved = load_config().to_dict()
    first = renamed_keys(saved, first_names=True)
    assert "llm_capacity" in first["replay"] and "validated_capacity" not in first["replay"]
    assert renamed_keys(first) == saved and "validated_capacity" in saved["replay"]


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.toml"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[env\nname=")
    with pytest.raises(ValueError, match="bad.toml"):
        load_config(bad)
    section = tmp_path / "section.toml"
    section.write_text("env = 3\n")
    with pytest.raises(ValueError, match="env is a section"):
        load_config(section)


def test_every_field_is_documented() -> None:
    lines = [line for line in describe_fields(Config()) if not line.startswith("[")]
    undocumented = [line for line in lines if "  # " not in line]
    assert not undocumented, undocumented
    assert parse_override("a.b.c=1") == {"a": {"b": {"c": "1"}}}
