"""save / load: exact round trips, atomic writes, and clear errors for bad files."""

from __future__ import annotations

import base64
import os
import pathlib
import struct

import numpy as np
import pytest

from ace_hybrid import MixedReplayBuffer

D = 5


def filled(seed: int = 0, rl_capacity: int = 23, validated_capacity: int = 7) -> MixedReplayBuffer:
    """Four episodes (36 RL slots) and 9 LLM items: both rings wrap at the default capacities."""
    rng = np.random.default_rng(seed)
    buf = MixedReplayBuffer(D, rl_capacity, validated_capacity, alpha=0.7, beta=0.3, tau=0.6, seed=seed)
    for ep in range(4):
        chain = rng.normal(size=(9, D)).astype(np.float32)
        for t in range(8):
            buf.add_rl(chain[t], t, float(rng.normal()), chain[t + 1], t == 7, False, ep, t)
    for i in range(9):
        o, n = rng.normal(size=(2, D)).astype(np.float32)
        buf.add_validated(o, i, 0.0, n, False, i == 3, 5, i, float(rng.normal()), i % 4 != 0)
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


@pytest.mark.parametrize("capacities", [(23, 7), (1000, 50)], ids=["wrapped", "partly-written"])
def test_round_trip_restores_everything_exactly(tmp_path: pathlib.Path, capacities):
    a = filled(1, *capacities)
    path = tmp_path / "buf.replay"
    a.save(path)
    b = MixedReplayBuffer.load(path)
    assert isinstance(b, MixedReplayBuffer)
    assert (b.obs_dim, b.rl_capacity, b.validated_capacity, b.alpha, b.beta, b.tau) == (D, *capacities, 0.7, 0.3, 0.6)
    assert (len(b), b.rl_size, b.validated_size, b.max_priority) == (len(a), a.rl_size, a.validated_size, a.max_priority)
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
    assert a.add_validated(obs, 1, 0.5, obs, False, False, 0, 0, 0.1, True) == b.add_validated(
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
    with pytest.raises(ValueError, match="newer ace_hybrid; upgrade"):
        MixedReplayBuffer.load(path)
    path.write_bytes(data[:8] + (1).to_bytes(4, "little") + data[12:])  # the layout before RL scalar records
    with pytest.raises(ValueError, match=r"unsupported format version 1 \(this build reads versions 2 to 3\)"):
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
    buf.add_rl(np.zeros(1, np.float32), 0, 0.0, np.ones(1, np.float32), False, False, 0, 0)
    path = tmp_path / "buf.replay"
    buf.save(path)
    data = bytearray(path.read_bytes())
    # Slot 1 holds the pending next observation, not a transition: give it a sum-tree leaf.
    patch(data, "rl.sum leaves", 1, np.float64(1.0))
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"inconsistent contents: RL slot 1 holds no transition"):
        MixedReplayBuffer.load(path)


# ---- saving only what is used, and reading version 2 files --------------------------------------------------


def test_a_file_holds_only_the_used_slots_not_the_capacity(tmp_path: pathlib.Path):
    obs_dim, adds = 64, 10
    sizes = {}
    for capacity in (1_000, 100_000):
        buf = MixedReplayBuffer(obs_dim, capacity, capacity // 5, seed=0)
        chain = np.random.default_rng(0).random((adds + 1, obs_dim), dtype=np.float32)
        for t in range(adds):
            buf.add_rl(chain[t], 0, 0.0, chain[t + 1], False, False, 0, t)
        path = tmp_path / f"cap{capacity}.replay"
        buf.save(path)
        sizes[capacity] = path.stat().st_size
    # Each used slot costs its observation plus less than 64 bytes of scalars and tree leaves; at most two slots
    # per transition (a chained episode uses adds + 1), plus the fixed header and checksum.
    bound = HEADER_BYTES + 8 + 2 * adds * (4 * obs_dim + 64)
    assert sizes[100_000] <= bound, (sizes, bound)
    assert sizes[1_000] == sizes[100_000]  # independent of the capacity
    loaded = MixedReplayBuffer.load(tmp_path / "cap100000.replay")
    assert loaded.rl_capacity == 100_000 and loaded.rl_size == adds


def test_an_empty_buffer_round_trips(tmp_path: pathlib.Path):
    a = MixedReplayBuffer(D, 50, 5, seed=4)
    path = tmp_path / "empty.replay"
    a.save(path)
    assert path.stat().st_size == HEADER_BYTES + 8
    b = MixedReplayBuffer.load(path)
    assert (len(b), b.rl_capacity, b.validated_capacity, b.get_rng_state()) == (0, 50, 5, a.get_rng_state())
    assert b.check_invariants() == ""


def build_v2_example() -> MixedReplayBuffer:
    """The buffer V2_FILE was saved from (by the format-version-2 writer); both rings have wrapped."""
    buf = MixedReplayBuffer(2, 6, 3, alpha=0.7, beta=0.4, tau=0.5, seed=21)
    for ep in (0, 1):
        for t in range(3):
            o, n = np.array([ep, t], np.float32), np.array([ep, t + 1], np.float32)
            buf.add_rl(o, t + 1, 0.5 * t - ep, n, t == 2, False, ep, t)
    for i in range(4):
        o = np.array([9, i], np.float32)
        buf.add_validated(o, i, -0.25 * i, o + 0.5, False, i == 2, 3, i, 0.3 * i - 0.4, i != 1)
    cols = buf.rl_columns()
    buf.update_priorities(cols["index"], np.linspace(0.5, 2.0, len(cols["index"])))
    buf.update_rewards(cols["index"][:1], np.array([4.0]))
    return buf


V2_FILE = base64.b64decode(
    "QUNFUlBMWQACAAAABAMCAQIAAAAAAAAABgAAAAAAAAADAAAAAAAAAGZmZmZmZuY/mpmZmZmZ2T8AAAAAAADgPwgAAAAAAAAABAAA"
    "AAAAAAABAQEAAAACAAAAxyXot5UKyga/1f4lKf9P6r/GXnj+rmSGwXW7CwoFraYAAIA/AAAAQAAAgD8AAEBAAAAAAAAAAEAAAAAA"
    "AABAQAAAgD8AAAAAAACAPwAAgD8DAAAAAAAAAAAAAAAAAAAAAQAAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAADAAAAAAAA"
    "AAAAgEAAAIA/AAAAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAAAgL8AAIC/AQAAAAAAAAACAAAAAAAAAAAA"
    "AL8AAAC/AQAAAAEAAAAFAAUABAQ9U868+P35PwAAAAAAAAAAKYP/e8Sy4z8AAAAAAAAAAAAAAAAAAPA/JgOB8U9A9T/+xRO76kUS"
    "QAAAAEAAAAAAAAAAPwAAAAAAAIA/AADAPwAAAEAAABBBAABAQAAAEEEAAIA/AAAQQQAAAEAAABhBAABgQAAAGEEAAMA/AAAYQQAA"
    "IEADAAAAAAAAAAEAAAAAAAAAAgAAAAAAAAAAAEC/AACAvgAAAL8AAEC/AACAvgAAAL8AAAA/zczMvc3MTD4DAAAAAwAAAAMAAAAD"
    "AAAAAQAAAAIAAAAIAAppVxSLCr8FQAAAAAAAAAAACM1elYPe9z/23uEqJtcQQMX5GOB+Zovi"
)


def test_version_2_files_still_load_exactly(tmp_path: pathlib.Path):
    path = tmp_path / "old.replay"
    path.write_bytes(V2_FILE)
    assert struct.unpack_from("<I", V2_FILE, 8)[0] == 2
    old, fresh = MixedReplayBuffer.load(path), build_v2_example()
    assert (old.obs_dim, old.rl_capacity, old.validated_capacity, old.alpha, old.beta, old.tau) == (2, 6, 3, 0.7, 0.4, 0.5)
    assert old.get_rng_state() == fresh.get_rng_state()
    sa, sb = old._tree_snapshot(), fresh._tree_snapshot()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
    for key, col in fresh.rl_columns().items():
        np.testing.assert_array_equal(old.rl_columns()[key], col, err_msg=key)
    assert old.check_invariants() == ""
    assert_same_batches(old, fresh)
    # Saved again, it is a version 3 file holding the same state.
    old.save(path)
    assert struct.unpack_from("<I", path.read_bytes(), 8)[0] == 3
    assert_same_batches(MixedReplayBuffer.load(path), fresh)


# ---- the file layout, for tests that edit files --------------------------------------------------------------

HEADER = (
    [("magic", 8), ("version", 4), ("byte_order", 4), ("obs_dim", 8), ("rl_capacity", 8), ("llm_capacity", 8),
     ("alpha", 8), ("beta", 8), ("tau", 8), ("rl_written", 8), ("llm_written", 8), ("has_prev", 1),
     ("prev_flags", 1), ("prev_episode", 4), ("prev_decision", 4)]
    + [(f"rng[{i}]", 8) for i in range(4)]
)
HEADER_BYTES = sum(size for _, size in HEADER)
# The 24-byte record of an RL slot ("rl.scalars"): field -> (offset, dtype).
RL_SCALARS = {"action": (0, "<i8"), "reward": (8, "<f4"), "original_reward": (12, "<f4"), "episode": (16, "<i4"),
              "decision": (20, "<i4")}


def _tree_nodes(n: int) -> int:
    total = n
    while n > 1:
        n = -(-n // 16)
        total += n
    return total


def layout(data: bytes) -> dict[str, tuple[int, int]]:
    """Block name -> (offset, size) for every block MixedReplay::save writes, in order (format versions 2 and 3)."""
    blocks, off = {}, 0
    for name, size in HEADER:
        blocks[name], off = (off, size), off + size

    def u64(name: str) -> int:
        return struct.unpack_from("<Q", data, blocks[name][0])[0]

    version, d = struct.unpack_from("<I", data, 8)[0], u64("obs_dim")
    if version == 2:
        n, m = u64("rl_capacity"), u64("llm_capacity")
        arrays = [("rl.obs", n * d * 4), ("rl.scalars", n * 24), ("rl.flags", n), ("rl.sum", _tree_nodes(n) * 8),
                  ("rl.max", _tree_nodes(n) * 4)]
        llm_tree = ("llm.sum", _tree_nodes(m) * 8)
    else:
        n, m = min(u64("rl_written"), u64("rl_capacity")), min(u64("llm_written"), u64("llm_capacity"))
        arrays = [("rl.obs", n * d * 4), ("rl.scalars", n * 24), ("rl.flags", n), ("rl.sum leaves", n * 8),
                  ("rl.max leaves", n * 4)]
        llm_tree = ("llm.sum leaves", m * 8)
    arrays += [("llm.obs", m * d * 4), ("llm.next_obs", m * d * 4), ("llm.action", m * 8), ("llm.reward", m * 4),
               ("llm.original_reward", m * 4), ("llm.improvement", m * 4), ("llm.episode", m * 4),
               ("llm.decision", m * 4), ("llm.flags", m), llm_tree]
    for name, size in arrays:
        blocks[name], off = (off, size), off + size
    assert off + 8 == len(data), "the layout does not account for every byte"
    blocks["checksum"] = (off, 8)
    return blocks


def _checksum(data: bytes, blocks: dict[str, tuple[int, int]]) -> int:
    """The writer's checksum: per block, mix in its length, then each 64-bit little-endian word."""
    mask, prime = (1 << 64) - 1, 0x100000001B3
    h = 0xC0FFEE1234567890
    for name, (off, n) in blocks.items():
        if name == "checksum":
            continue
        h = ((h ^ n) * prime) & mask
        chunk = data[off:off + n]
        for i in range(0, n, 8):
            w = int.from_bytes(chunk[i:i + 8].ljust(8, b"\0"), "little")
            h = ((h ^ w) * prime) & mask
            h ^= h >> 29
    return h


def patch(data: bytearray, block: str, index: int, value, field: str | None = None) -> None:
    """Writes value (a numpy scalar, written as its own dtype) as element `index` of `block` (or `field` of the
    index-th RL scalar record), then recomputes the checksum as the writer does."""
    blocks = layout(bytes(data))
    off, size = blocks[block]
    raw = np.asarray(value).tobytes()
    if field is not None:
        field_off, dtype = RL_SCALARS[field]
        raw = np.asarray(value, dtype).tobytes()
        where = off + 24 * index + field_off
    else:
        where = off + len(raw) * index
    assert off <= where and where + len(raw) <= off + size, f"{block}[{index}] is outside the block"
    data[where:where + len(raw)] = raw
    data[-8:] = _checksum(bytes(data), blocks).to_bytes(8, "little")


def test_the_layout_helper_reproduces_the_writers_checksum(saved):
    _, data = saved
    assert _checksum(data, layout(data)).to_bytes(8, "little") == data[-8:]
    assert _checksum(V2_FILE, layout(V2_FILE)).to_bytes(8, "little") == V2_FILE[-8:]


# ---- load validates the contents of checksum-valid files ------------------------------------------------------


def _slots(buf: MixedReplayBuffer) -> dict[str, int]:
    """One slot of each kind in filled(3): an RL transition, an RL slot holding only a next observation, and a
    valid and an invalid LLM item."""
    heads = set(((buf.rl_columns()["index"] >> 1) % buf.rl_capacity).tolist())
    validated_leaves = buf._tree_snapshot()["validated_leaves"]
    return {"head": min(heads), "not_head": min(set(range(buf.rl_capacity)) - heads),
            "valid": int(np.flatnonzero(validated_leaves > 0)[0]), "invalid": int(np.flatnonzero(validated_leaves == 0)[0])}


nan, inf, f32 = float("nan"), float("inf"), np.float32
# (block, slot kind or fixed slot, column within the row or None, value, RL record field or None, error pattern)
BAD_CONTENTS = {
    "nan observation": ("rl.obs", 2, 1, f32(nan), None, r"rl\.obs\[slot 2, 1\] = nan is not finite"),
    "infinite observation": ("rl.obs", 4, 0, f32(-inf), None, r"rl\.obs\[slot 4, 0\] = -inf is not finite"),
    "infinite LLM next observation": ("llm.next_obs", 3, 4, f32(inf), None,
                                      r"llm\.next_obs\[slot 3, 4\] = inf is not finite"),
    "negative RL action": ("rl.scalars", "head", None, -3, "action",
                           r"rl\.action\[slot {head}\] = -3 out of range \[0, 9223372036854775807\]"),
    "negative LLM action": ("llm.action", 2, None, np.int64(-1), None, r"llm\.action\[slot 2\] = -1 out of range"),
    "negative episode": ("rl.scalars", "head", None, -1, "episode",
                         r"rl\.episode\[slot {head}\] = -1 out of range \[0, 2147483647\]"),
    "negative decision": ("rl.scalars", "head", None, -5, "decision", r"rl\.decision\[slot {head}\] = -5 out of"),
    "negative LLM episode": ("llm.episode", 1, None, np.int32(-2), None, r"llm\.episode\[slot 1\] = -2 out of"),
    "negative LLM decision": ("llm.decision", 0, None, np.int32(-9), None, r"llm\.decision\[slot 0\] = -9 out of"),
    "infinite reward": ("rl.scalars", "head", None, inf, "reward", r"rl\.reward\[slot {head}\] = inf is not finite"),
    "unknown RL flag bits": ("rl.flags", "head", None, np.uint8(4 | 16), None,
                             r"rl\.flags\[slot {head}\] = 20 has unknown bits"),
    "I_v byte other than 0 or 1": ("llm.flags", "valid", None, np.uint8(8 | 32), None,
                                   r"llm\.flags\[slot {valid}\] = 40 has unknown bits"),
    "I_v cleared under a weight": ("llm.flags", "valid", None, np.uint8(0), None,
                                   r"llm\.sum leaf\[slot {valid}\] = \S+ does not match 0 \(I_v = 0\)"),
    "I_v set without a weight": ("llm.flags", "invalid", None, np.uint8(8), None,
                                 r"llm\.sum leaf\[slot {invalid}\] = 0 does not match I_v \* exp"),
    "negative priority": ("rl.max leaves", "head", None, f32(-1.0), None,
                          r"rl\.priority\[slot {head}\] = -1 must be finite and >= 0"),
    "nan priority": ("rl.max leaves", "head", None, f32(nan), None, r"rl\.priority\[slot {head}\] = nan must be"),
    "leaf disagreeing with the priority": ("rl.sum leaves", "head", None, np.float64(123.0), None,
                                           r"rl\.sum leaf\[slot {head}\] = 123 does not match priority\^alpha"),
    "priority on a slot without a transition": ("rl.max leaves", "not_head", None, f32(2.0), None,
                                                r"RL slot {not_head} holds no transition but has priority 2"),
    "nan improvement": ("llm.improvement", "valid", None, f32(nan), None,
                        r"llm\.improvement\[slot {valid}\] = nan is not finite"),
    "improvement disagreeing with the weight": ("llm.improvement", "valid", None, f32(5.0), None,
                                                r"llm\.sum leaf\[slot {valid}\] = \S+ does not match I_v \* exp"),
    "has_prev not 0 or 1": ("has_prev", 0, None, np.uint8(2), None, r"has_prev = 2 must be 0 or 1"),
    "negative prev_decision": ("prev_decision", 0, None, np.int32(-1), None,
                               r"prev_decision = -1 out of range \[0, 2147483647\]"),
    "unknown prev_flags bits": ("prev_flags", 0, None, np.uint8(8), None, r"prev_flags = 8 has unknown bits"),
}


@pytest.mark.parametrize("case", list(BAD_CONTENTS))
def test_load_refuses_checksum_valid_files_with_bad_contents_naming_slot_and_value(saved, case):
    path, data = saved
    block, slot, column, value, field, pattern = BAD_CONTENTS[case]
    slots = _slots(filled(3))  # the buffer `saved` holds
    slot = slots[slot] if isinstance(slot, str) else slot
    index = slot if column is None else slot * D + column
    bad = bytearray(data)
    patch(bad, block, index, value, field)
    path.write_bytes(bytes(bad))
    buf = filled(4)
    with pytest.raises(ValueError, match=r"buf\.replay': inconsistent contents: " + pattern.format(**slots)):
        buf._load(str(path))
    assert_same_batches(buf, filled(4))  # a refused file changes nothing


def test_version_2_files_are_validated_too(tmp_path: pathlib.Path):
    bad = bytearray(V2_FILE)
    patch(bad, "llm.obs", 1, f32(nan))  # slot 0, column 1
    path = tmp_path / "old.replay"
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match=r"inconsistent contents: llm\.obs\[slot 0, 1\] = nan is not finite"):
        MixedReplayBuffer.load(path)
