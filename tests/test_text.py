"""Text encoders: deterministic, bounded, saying what matters."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid.grid.text import CHARS_PER_TOKEN, LineEndpoints, TrajectoryStep, describe_state, describe_trajectory

LAYOUT = LineEndpoints(n_sub=4, line_or_sub=np.array([0, 1, 2, 0]), line_ex_sub=np.array([1, 2, 3, 3]),
                    overflow_allowed=3)


def fake_obs(rho, status, overflow=(0, 0, 0, 0), cooldown=(0, 0, 0, 0), maintenance=(-1, -1, -1, -1)):
    return SimpleNamespace(rho=np.array(rho), line_status=np.array(status), timestep_overflow=np.array(overflow),
                           time_before_cooldown_line=np.array(cooldown), time_next_maintenance=np.array(maintenance),
                           hour_of_day=14, minute_of_hour=35)


def test_state_text_reports_overloads_disconnections_and_time() -> None:
    obs = fake_obs([1.07, 0.5, 0.0, 0.93], [True, True, False, True], overflow=(2, 0, 0, 0), cooldown=(0, 0, 3, 0))
    text = describe_state(obs, LAYOUT)
    assert text.startswith("Time 14:35.")
    assert "line 0 (sub 0-sub 1) at 107% (overloaded 2/3 steps)" in text
    assert text.index("line 0") < text.index("line 3 (sub 0-sub 3) at 93%")
    assert "Disconnected: line 2 (sub 2-sub 3) cooldown 3 steps" in text
    assert "Substations near the trouble: 0, 1, 3." in text


def test_state_text_is_deterministic_and_bounded() -> None:
    obs = fake_obs([0.95, 0.95, 0.95, 0.95], [True] * 4)
    assert describe_state(obs, LAYOUT) == describe_state(obs, LAYOUT)
    assert len(describe_state(obs, LAYOUT, max_chars=60)) <= 60
    with pytest.raises(ValueError, match="max_chars"):
        describe_state(obs, LAYOUT, max_chars=3)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(0, 2)), min_size=1, max_size=300), st.integers(16, 300))
def test_trajectory_text_fits_the_token_budget(items, max_tokens) -> None:
    steps = [TrajectoryStep(step=i * 3, action_text=f"substation {i % 7}: split", reward=r, max_rho=m)
             for i, (r, m) in enumerate(items)]
    text = describe_trajectory(steps, max_tokens=max_tokens)
    assert len(text) <= max_tokens * CHARS_PER_TOKEN + 60  # header is always kept
    assert text == describe_trajectory(steps, max_tokens=max_tokens)


def test_trajectory_text_keeps_the_key_steps_in_time_order() -> None:
    steps = [TrajectoryStep(step=i, action_text="do nothing", reward=0.1, max_rho=0.95) for i in range(40)]
    steps[7] = TrajectoryStep(step=7, action_text="substation 4: line 2 to bus 2", reward=-9.0, max_rho=1.3)
    steps[30] = TrajectoryStep(step=30, action_text="reconnect line 5", reward=5.0, max_rho=0.7)
    text = describe_trajectory(steps, max_tokens=80, survived=False)
    assert "[7] step 7: substation 4: line 2 to bus 2 -> -9.00, 130%" in text
    assert "[30] step 30" in text and text.index("[7]") < text.index("[30]")
    assert "collapsed" in text and "omitted" in text
    assert describe_trajectory([]) == "Empty trajectory."
