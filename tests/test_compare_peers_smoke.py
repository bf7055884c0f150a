"""Smoke tests of benchmarks/compare_peers.py: the real CLI end to end with tiny sizes, plus its parts.

The CLI run breaks cpprb on purpose (a package on PYTHONPATH that raises ImportError) and disables
tianshou on the command line, so the report must show both as unavailable, with their reasons,
whatever is installed here; every other implementation is either measured or reported unavailable.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "compare_peers.py"


def _load_compare_peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_peers_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


cp = _load_compare_peers()
peers = cp.peers

NUMBER = re.compile(r"^[0-9][0-9,]*(\.[0-9]+)?( [kM])?$")


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("compare_peers")
    broken = tmp / "broken"
    (broken / "cpprb").mkdir(parents=True)
    (broken / "cpprb" / "__init__.py").write_text('raise ImportError("simulated: cpprb is broken")\n')
    md = tmp / "RESULTS.md"
    md.write_text(
        "# Results\n\nkept above\n\n"
        f"{cp.begin_marker('replay')}\nstale replay section\n{cp.end_marker('replay')}\n\nkept below\n"
    )
    js = tmp / "out.json"
    env = dict(os.environ)
    # The child imports what this process imports (ace_hybrid wherever it was found), plus the broken cpprb.
    env["PYTHONPATH"] = os.pathsep.join([str(broken), *(p for p in sys.path if p)])
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--sizes", "small",
        "--rounds", "1",
        "--only", "replay",
        "--block-seconds", "0.002",
        "--disable-peer", "tianshou",
        "--output", str(md),
        "--json", str(js),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"stdout": proc.stdout, "md": md.read_text(), "json": json.loads(js.read_text())}


def _cells(report: dict[str, object]) -> dict[tuple[str, int], dict[str, str]]:
    header = report["header"]
    out = {}
    for row in report["rows"]:
        key = (row[0], int(row[1]))
        assert key not in out, f"duplicate row {key}"
        out[key] = dict(zip(header, row))
    return out


def test_table_has_every_operation_at_every_size(cli_run: dict) -> None:
    report = cli_run["json"]["replay"]
    cells = _cells(report)
    labels = [label for _, label, _ in cp.OPS] + [label for _, label in cp.BYTES_ROWS]
    expected = {(label, d) for label in labels for d, _ in cp.SMALL_SIZES}
    assert set(cells) == expected
    for cls in peers.ADAPTERS:
        assert cls.title in report["header"]


def test_missing_peers_are_reported_unavailable_not_dropped(cli_run: dict) -> None:
    report = cli_run["json"]["replay"]
    reasons = report["data"]["reasons"]
    assert reasons["cpprb"].startswith("cannot import cpprb: ImportError: simulated")
    assert reasons["tianshou"] == "disabled on the command line"
    for row in _cells(report).values():
        assert row["cpprb"].startswith("unavailable (cannot import cpprb")
        assert row["tianshou"] == "unavailable (disabled on the command line)"
    assert "cpprb: unavailable (cannot import cpprb: ImportError: simulated: cpprb is broken)" in cli_run["md"]
    goals = {g["name"]: g for g in report["goals"]}
    for d, _ in cp.SMALL_SIZES:
        assert goals[f"single add >= 5x cpprb at D={d}"]["status"] in ("UNKNOWN",)


def test_available_implementations_are_measured(cli_run: dict) -> None:
    report = cli_run["json"]["replay"]
    reasons = report["data"]["reasons"]
    assert reasons["numpy"] is None  # the baseline is always there
    rate_labels = {label for _, label, _ in cp.OPS}
    for (label, _d), row in _cells(report).items():
        for cls in peers.ADAPTERS:
            cell = row[cls.title]
            if reasons[cls.name] is not None:
                assert cell.startswith("unavailable ("), (label, cls.name, cell)
            elif label in rate_labels and not (cls.name == "numpy" and label.startswith("update")):
                assert NUMBER.match(cell), (label, cls.name, cell)
    for goal in report["goals"]:
        assert goal["status"] in ("PASS", "FAIL", "UNKNOWN")
        if reasons["ace"] is not None:
            assert goal["status"] == "UNKNOWN"


def test_output_file_section_is_replaced_and_the_rest_kept(cli_run: dict) -> None:
    md = cli_run["md"]
    assert "kept above" in md and "kept below" in md
    assert "stale replay section" not in md
    assert md.count(cp.begin_marker("replay")) == 1 and md.count(cp.end_marker("replay")) == 1
    assert md.index("kept above") < md.index(cp.begin_marker("replay")) < md.index("kept below")
    assert "| operation | D |" in md
    assert re.search(r"Command: `python \S*compare_peers.py --sizes small --rounds 1", md)
    assert re.search(r"^- (PASS|FAIL|UNKNOWN): ", cli_run["stdout"], re.M)


def test_update_markdown_appends_then_replaces(tmp_path: Path) -> None:
    md = tmp_path / "r.md"
    cp.update_markdown(md, "x", "first\n")
    cp.update_markdown(md, "y", "other\n")
    cp.update_markdown(md, "x", "second\n")
    text = md.read_text()
    assert "first" not in text and "second" in text and "other" in text
    assert text.index(cp.begin_marker("x")) < text.index(cp.begin_marker("y"))


def test_episode_stream_has_consecutive_observations() -> None:
    a = peers.EpisodeStream(5, seed=3).take(700)
    b = peers.EpisodeStream(5, seed=3).take(700)
    np.testing.assert_array_equal(a.obs, b.obs)
    same_episode = a.episode[1:] == a.episode[:-1]
    np.testing.assert_array_equal(a.next_obs[:-1][same_episode], a.obs[1:][same_episode])
    np.testing.assert_array_equal(a.step[1:][same_episode], a.step[:-1][same_episode] + 1)
    ends = ~same_episode
    assert np.all(a.done[:-1][ends] | a.truncated[:-1][ends])
    assert not np.any((a.done | a.truncated)[:-1][same_episode])
    pool = peers.EpisodeStream(5, seed=4).take(300, whole_episodes=True)
    assert pool.step[0] == 0 and (pool.done[-1] or pool.truncated[-1])


def _available(cls: type) -> str | None:
    with warnings.catch_warnings():  # third-party import-time warnings are not ours
        warnings.simplefilter("ignore")
        return cls.unavailable_reason()


@pytest.mark.parametrize("cls", peers.ADAPTERS, ids=lambda c: c.name)
def test_adapter_runs_every_prepared_call(cls: type) -> None:
    reason = _available(cls)
    if reason is not None:
        pytest.skip(reason)
    d, cap = 6, 600
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = cls(d, cap, alpha=0.6, is_exponent=0.4, seed=1)
        stream = peers.EpisodeStream(d, seed=2)
        rng = np.random.default_rng(0)
        for _ in range(3):
            t = stream.take(cap // 3)
            a.update(a.add_batch(t), peers.priorities_for(len(t), rng))
        assert 0.95 * cap <= len(a) <= cap
        pool = stream.take(128, whole_episodes=True)
        prio = peers.priorities_for(16, rng)
        calls = [a.single_add_calls(pool), a.batch_add_calls(pool.chunks(64)), a.sample_calls(16)]
        calls.append(a.train_step_calls(16, prio))
        if a.prioritised:
            calls.append(a.update_calls(a.sampled_index(16), prio))
        for fn, prepared in calls:
            assert cp.time_block(fn, prepared, 2 * len(prepared)) >= 0
        assert 0.95 * cap <= len(a) <= cap
        per, how = a.storage_bytes()
    assert per >= 2 * 4 * d * (0.5 if cls.name == "ace" else 1.0) and how


def test_implementation_failing_mid_run_is_reported_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_train_step(self: object, batch_size: int, priority: np.ndarray) -> tuple:
        def step() -> None:
            raise RuntimeError("boom")

        return step, [((), {})]

    monkeypatch.setattr(peers.NumpyRing, "train_step_calls", broken_train_step)
    others = frozenset(c.name for c in peers.ADAPTERS if c.name != "numpy")
    cfg = cp.RunConfig(
        rounds=1, sizes="small", seed=0, disabled=others, block_seconds=0.001, torch_threads=1, pairwise="never"
    )
    report = cp.replay_section(cfg)
    numpy_col = report.header.index(peers.NumpyRing.title)
    assert len(report.rows) == len(cp.SMALL_SIZES) * (len(cp.OPS) + len(cp.BYTES_ROWS))
    for row in report.rows:
        assert row[numpy_col] == "unavailable (train failed: RuntimeError: boom)"


@pytest.mark.grid2op
def test_kernel_sections_report_every_row_and_goal(tmp_path: Path) -> None:
    """The sampling, mask, enumeration and catalog sections run end to end at small sizes."""
    pytest.importorskip("grid2op")
    js = tmp_path / "kernels.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = [sys.executable, str(SCRIPT), "--sizes", "small", "--rounds", "1", "--block-seconds", "0.002",
           "--only", "sampling", "--only", "mask", "--only", "enumeration", "--only", "catalog", "--json", str(js)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(js.read_text())
    for key in ("sampling", "mask", "enumeration", "catalog"):
        assert data[key]["rows"], key
        assert data[key]["goals"], key
        assert all(g["status"] in ("PASS", "FAIL", "UNKNOWN") for g in data[key]["goals"])
    assert data["enumeration"]["rows"][0][1] == data["enumeration"]["rows"][1][1]  # same count as grid2op
