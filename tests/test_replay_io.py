"""save / load: exact round trips, atomic writes, and clear errors for bad files."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from ace_hybrid import MixedReplayBuffer

D = 5


def filled(seed: int = 0) -> MixedReplayBuffer:
    rng = np.random.default_rng(seed)
    buf = MixedReplayBuffer(D, 23, 7, alpha=0.7, beta=0.3, tau=0.6, seed=seed)
    for ep in range(4):
        chain = rng.normal(size=(9, D)).astype(np.float32)
        for t in range(8):
            buf.add_rl(chain[t], t, float(rng.normal()), chain[t + 1], t == 7, False, ep, t)
    for i in range(9):
        o, n = rng.normal(size=(2, D)).astype(np.float32)
        buf.add_llm(o, i, 0.0, n, False, i == 3, 5, i, float(rng.normal()), i % 4 != 0)
    cols = buf.rl_columns()
    buf.update_priorities(cols["index"], rng.uniform(0.1, 4.0, size=len(cols["index"])))
    buf.update_rewards(cols["index"][:3], np.array([9.0, 8.0, 7.0]))
    buf.sample(16)  # advance the generator
    return buf


def assert_same_batches(a: MixedReplayBuffer, b: MixedReplayBuffer, n: int = 3) -> None:
    for _ in range(n):
        x, y = a.sample(32, 0.6), b.sample(32, 0.6)
        for name, u, v in zip(x._fields, x, y):
            np.testing.assert_array_equal(u, v, err_msg=name)


def test_round_trip_restores_everything_exactly(tmp_path: pathlib.Path):
    a = filled(1)
    path = tmp_path / "buf.replay"
    a.save(path)
    b = MixedReplayBuffer.load(path)
    assert isinstance(b, MixedReplayBuffer)
    assert (b.obs_dim, b.rl_capacity, b.llm_capacity, b.alpha, b.beta, b.tau) == (D, 23, 7, 0.7, 0.3, 0.6)
    assert (len(b), b.rl_size, b.llm_size, b.max_priority) == (len(a), a.rl_size, a.llm_size, a.max_priority)
    assert b.get_rng_state() == a.get_rng_state()
    sa, sb = a._tree_snapshot(), b._tree_snapshot()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
    for key, col in a.rl_columns().items():
        np.testing.assert_array_equal(col, b.rl_columns()[key], err_msg=key)
    assert_same_batches(a, b)
    # Write pointers and the episode continuation state too: the next adds behave identically.
    last = a.rl_columns()
    obs = a.get(last["index"][-1:]).next_obs[0]
    args = (obs, 1, 0.5, obs + 1, False, False, int(last["episode"][-1]), int(last["decision"][-1]) + 1)
    assert a.add_rl(*args) == b.add_rl(*args)
    assert a.add_llm(obs, 1, 0.5, obs, False, False, 0, 0, 0.1, True) == b.add_llm(
        obs, 1, 0.5, obs, False, False, 0, 0, 0.1, True)
    assert_same_batches(a, b)
    assert b.check_invariants() == ""


def test_save_is_atomic_and_overwrites(tmp_path: pathlib.Path):
    path = tmp_path / "buf.replay"
    filled(1).save(str(path))
    filled(2).save(path)
    assert sorted(os.listdir(tmp_path)) == ["buf.replay"]  # no temporary file left behind
    assert_same_batches(MixedReplayBuffer.load(path), MixedReplayBuffer.load(path))
    with pytest.raises(OSError):
        filled(1).save(tmp_path / "missing-dir" / "buf.replay")
    with pytest.raises(FileNotFoundError):
        MixedReplayBuffer.load(tmp_path / "nope.replay")


@pytest.fixture()
def saved(tmp_path: pathlib.Path) -> tuple[pathlib.Path, bytes]:
    path = tmp_path / "buf.replay"
    filled(3).save(path)
    return path, path.read_bytes()


@pytest.mark.parametrize("keep", [0, 7, 20, 100, -9, -1])
def test_truncated_file_gives_a_value_error_naming_the_file(saved, keep):
    path, data = saved
    path.write_bytes(data[:keep] if keep >= 0 else data[:keep])
    with pytest.raises(ValueError, match=r"buf\.replay.*(truncated|does not match)"):
        MixedReplayBuffer.load(path)


def test_every_flipped_bit_position_is_detected(saved):
    path, data = saved
    rng = np.random.default_rng(0)
    offsets = sorted(set(rng.integers(0, len(data), size=60).tolist()) | {0, 9, 13, 20, 60, len(data) - 1})
    for off in offsets:
        bad = bytearray(data)
        bad[off] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(bad))
        with pytest.raises(ValueError, match=r"buf\.replay"):
            MixedReplayBuffer.load(path)


def test_wrong_magic_and_version_are_named(saved):
    path, data = saved
    path.write_bytes(b"NOTAREPL" + data[8:])
    with pytest.raises(ValueError, match="magic"):
        MixedReplayBuffer.load(path)
    path.write_bytes(data[:8] + (99).to_bytes(4, "little") + data[12:])
    with pytest.raises(ValueError, match="version 99"):
        MixedReplayBuffer.load(path)
    path.write_bytes(data[:8] + (1).to_bytes(4, "little") + data[12:])  # the layout before RL scalar records
    with pytest.raises(ValueError, match=r"unsupported format version 1 \(this build reads version 2\)"):
        MixedReplayBuffer.load(path)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="truncated"):
        MixedReplayBuffer.load(path)


def test_failed_load_leaves_the_buffer_unchanged(saved):
    path, data = saved
    buf = filled(4)
    reference = filled(4)
    bad = bytearray(data)
    bad[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="checksum"):
        buf._load(str(path))
    assert_same_batches(buf, reference)
    assert buf.check_invariants() == ""


def test_consistent_checksum_but_inconsistent_contents_is_refused(tmp_path: pathlib.Path):
    """A file edited and re-checksummed (e.g. by a buggy tool) is still validated before use."""
    buf = MixedReplayBuffer(1, 3, 1, alpha=1.0)
    path = tmp_path / "buf.replay"
    buf.save(path)
    data = bytearray(path.read_bytes())
    # Make an RL tree leaf non-zero in an empty buffer and recompute the checksum as the writer does.
    header = 8 + 4 + 4 + 3 * 8 + 3 * 8 + 2 * 8 + 2 + 2 * 4 + 4 * 8
    rl_obs, rl_cols = 3 * 1 * 4, 3 * (8 + 4 + 4 + 4 + 4 + 1)
    leaf0 = header + rl_obs + rl_cols
    data[leaf0:leaf0 + 8] = np.float64(1.0).tobytes()
    data[-8:] = _checksum(bytes(data[:-8]), blocks=_blocks(len(data) - 8, header)).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="inconsistent|differs"):
        MixedReplayBuffer.load(path)


def _blocks(total: int, header: int) -> list[int]:
    """Block sizes in the order MixedReplay::save writes them (D = 1, capacities 3 and 1)."""
    fixed = [8, 4, 4] + [8] * 8 + [1, 1, 4, 4] + [8] * 4
    assert sum(fixed) == header
    rl = [12, 3 * 24, 3, 8 * 4, 4 * 4]  # obs, scalar records (action, rewards, episode, decision), flags, trees
    llm = [4, 4, 8, 4, 4, 4, 4, 4, 1, 8]
    sizes = fixed + rl + llm
    assert sum(sizes) == total
    return sizes


def _checksum(data: bytes, blocks: list[int]) -> int:
    mask, prime = (1 << 64) - 1, 0x100000001B3
    h, off = 0xC0FFEE1234567890, 0
    for n in blocks:
        h = ((h ^ n) * prime) & mask
        chunk = data[off:off + n]
        off += n
        for i in range(0, n, 8):
            w = int.from_bytes(chunk[i:i + 8].ljust(8, b"\0"), "little")
            h = ((h ^ w) * prime) & mask
            h ^= h >> 29
    return h
