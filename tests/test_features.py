"""Observation features and their running normalisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ace_hybrid.grid.features import RunningNormalizer


@pytest.mark.grid2op
def test_features_have_the_documented_layout(make_grid_env) -> None:
    from ace_hybrid.grid.env import reset_episode
    from ace_hybrid.grid.features import ObservationFeatures

    env = make_grid_env("l2rpn_case14_sandbox")
    features = ObservationFeatures(env)
    obs = reset_episode(env, 0, 0)
    x = features(obs)
    assert x.dtype == np.float32 and x.shape == (features.dim,) and len(features.names()) == features.dim
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(x[: env.n_line], obs.rho, rtol=1e-6)
    start = 5 * env.n_line
    np.testing.assert_array_equal(x[start : start + env.dim_topo], (obs.topo_vect >= 2).astype(np.float32))
    assert features.names()[0] == "rho[0]"


@settings(max_examples=30, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(2, 40), st.just(3)), elements=st.floats(-1e3, 1e3)),
       st.integers(1, 5))
def test_running_normalizer_matches_batch_statistics(data: np.ndarray, chunks: int) -> None:
    norm = RunningNormalizer(3)
    for part in np.array_split(data, chunks):
        norm.update(part)
    np.testing.assert_allclose(norm.mean, data.mean(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(norm.var, data.var(axis=0), rtol=1e-7, atol=1e-6)
    assert norm.count == data.shape[0]


def test_running_normalizer_round_trips_and_clips() -> None:
    norm = RunningNormalizer(2, clip=3.0)
    norm.update(np.array([[0.0, 1.0], [2.0, 1.0]]))
    z = norm(np.array([1e6, 1.0]))
    assert z[0] == 3.0 and z[1] == 0.0
    other = RunningNormalizer(2)
    other.load_state_dict(norm.state_dict())
    np.testing.assert_array_equal(other(np.array([0.5, 2.0])), norm(np.array([0.5, 2.0])))
    with pytest.raises(ValueError, match="dim"):
        RunningNormalizer(3).load_state_dict(norm.state_dict())


def test_running_normalizer_rejects_bad_input() -> None:
    norm = RunningNormalizer(2)
    with pytest.raises(ValueError, match="features"):
        norm.update(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="NaN"):
        norm.update(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="dim"):
        RunningNormalizer(0)
