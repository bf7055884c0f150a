"""What a replay file may cost and hold (issue 35): the checksum before any allocation a capacity asks for, write
counters that handles can address, actions inside the buffer's action set, and a header fuzz."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ace_hybrid import MixedReplayBuffer
from test_replay_io import HEADER, HEADER_BYTES, _checksum, filled, layout

LIMIT = 2**62  # positions a partition may write: handles (position << 1) | partition stay in int64
MiB = 2**20
# The memory tests read a child's peak RSS from /proc and cap its address space, which ASan's shadow memory would
# exceed.
measures_memory = pytest.mark.skipif(
    sys.platform != "linux" or "asan" in os.environ.get("LD_PRELOAD", ""),
    reason="/proc/self/status and RLIMIT_AS as on Linux, without ASan",
)


def header_offset(name: str) -> int:
    off = 0
    for field, size in HEADER:
        if field == name:
            return off
        off += size
    raise KeyError(name)


def set_header(data: bytes, name: str, value: int, *, reseal: bool = True) -> bytes:
    """``data`` with the uint64 header field ``name`` set to ``value``; the checksum recomputed over the blocks of
    the ORIGINAL layout (the writer's, had it written this header) unless ``reseal`` is False."""
    blocks = layout(data)
    out = bytearray(data)
    struct.pack_into("<Q", out, header_offset(name), value)
    if reseal:
        out[-8:] = _checksum(bytes(out), blocks).to_bytes(8, "little")
    return bytes(out)


def partly_written(obs_dim: int = 64, rl_capacity: int = 1000, validated_capacity: int = 50) -> MixedReplayBuffer:
    """Neither ring has wrapped: the file holds 20 RL slots and 3 validated items whatever the capacities, so a
    capacity field can change without changing the file's size."""
    rng = np.random.default_rng(0)
    buf = MixedReplayBuffer(obs_dim, rl_capacity, validated_capacity, seed=1)
    chain = rng.normal(size=(20, obs_dim)).astype(np.float32)
    for t in range(19):
        buf.add_rl(chain[t], t % 3, 0.5, chain[t + 1], t == 18, False, 0, t)
    for i in range(3):
        buf.add_validated(chain[i], i, 0.0, chain[i + 1], False, False, 1, i, 0.2, True)
    return buf


# ---- memory: the checksum comes before the allocation, and a load costs what it reports ---------------------

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from ace_hybrid import MixedReplayBuffer

    def status(key):
        return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) * 1024

    # A safety net: whatever a regression asks for fails as an allocation here, never as the machine's OOM killer.
    headroom = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (status("VmSize") + headroom, resource.RLIM_INFINITY))
    # The peak RSS of this process (VmHWM). Not ru_maxrss: Linux carries it over fork and exec, so it starts at
    # the parent's (pytest's) RSS.
    before = peak = status("VmHWM")
    results = []
    for path in sys.argv[2:]:
        try:
            buf = MixedReplayBuffer.load(path)
            assert buf.check_invariants() == ""
            results.append({"ok": True, "nbytes": buf.nbytes, "rl_capacity": buf.rl_capacity})
            peak = max(peak, status("VmHWM"))  # while the buffer is alive: it counts its current RSS
            del buf
        except Exception as exc:
            results.append({"ok": False, "type": type(exc).__name__, "message": str(exc)})
    print(json.dumps({"growth": max(peak, status("VmHWM")) - before, "results": results}))
    """
)


def load_in_child(paths: list[pathlib.Path], headroom: int) -> tuple[int, list[dict]]:
    """Load each file in a fresh interpreter whose address space is capped at its start + ``headroom`` bytes; the
    growth of its peak RSS over all loads and each outcome."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(headroom), *map(str, paths)], capture_output=True,
                         text=True, timeout=120, check=True)
    report = json.loads(out.stdout)
    return report["growth"], report["results"]


@measures_memory
def test_a_corrupted_capacity_field_fails_the_checksum_without_allocating_it(tmp_path: pathlib.Path):
    """The issue's values of ``rl_capacity`` (2**24, 2**27, 2**34: gigabytes allocated, or a bare MemoryError, before
    the checksum failed) and every single-bit flip of either capacity field leave the file's size unchanged; each
    must be a checksum (or header) error that costs no memory."""
    buf = partly_written()
    good = tmp_path / "good.replay"
    buf.save(good)
    data = good.read_bytes()
    paths = []
    for field, original in (("rl_capacity", 1000), ("llm_capacity", 50)):
        values = {original ^ (1 << b) for b in range(64)} | ({2**24, 2**27, 2**34} if field == "rl_capacity" else set())
        for value in sorted(values):
            path = tmp_path / f"{field}-{value}.replay"
            path.write_bytes(set_header(data, field, value, reseal=False))
            paths.append(path)
    growth, results = load_in_child(paths, headroom=512 * MiB)
    for path, r in zip(paths, results):
        assert not r["ok"] and r["type"] == "ValueError", (path.name, r)
        assert path.name in r["message"], r
        assert any(s in r["message"] for s in ("checksum mismatch", "invalid header", "does not match")), r
    assert growth < 16 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB loading corrupted files"


@measures_memory
def test_a_load_takes_no_more_memory_than_the_capacity_it_reports(tmp_path: pathlib.Path):
    """Resealed capacities (a file written so) are allocated after the checksum passes: the child's peak RSS grows by
    at most the largest ``nbytes`` it loaded (plus the huge-page rounding of its 15 columns and a 1 MiB read buffer),
    and one that does not fit is a ValueError naming the file, the column, the header field and the bytes."""
    buf = partly_written()
    good = tmp_path / "good.replay"
    buf.save(good)
    data = good.read_bytes()
    capacities = [1000, 2**16, 2**18, 2**22]  # 0.3 MB, 19 MB, 77 MB, 1.2 GB at obs_dim 64
    paths = []
    for value in capacities:
        path = tmp_path / f"cap{value}.replay"
        path.write_bytes(set_header(data, "rl_capacity", value))
        paths.append(path)
    growth, results = load_in_child(paths, headroom=512 * MiB)
    assert [r["ok"] for r in results] == [True, True, True, False], results
    assert [r["rl_capacity"] for r in results[:3]] == capacities[:3]
    largest = max(r["nbytes"] for r in results[:3])
    assert largest > 64 * MiB  # the measurement has something to see
    assert 0.5 * largest < growth <= largest + 48 * MiB, (growth, largest)
    refused = results[3]
    assert refused["type"] == "ValueError", refused
    assert refused["message"].startswith(f"replay file '{paths[3]}': cannot allocate 1073741824 bytes for rl.obs, "
                                         "sized by the header's rl_capacity = 4194304 and obs_dim = 64: out of memory")


# ---- write counters: every handle >= 0, every save loadable ---------------------------------------------------


def near_the_limit(data: bytes, field: str, capacity: int, odd_room: bool) -> tuple[bytes, int]:
    """``data`` (a file whose rings have wrapped) with the counter ``field`` moved up by whole generations, so that
    every slot keeps its contents, to the largest value below 2**62 - 2 whose distance to 2**62 is odd (or any);
    that value."""
    written = struct.unpack_from("<Q", data, header_offset(field))[0]
    value = LIMIT - 3 - (LIMIT - 3 - written) % capacity
    if odd_room and (LIMIT - value) % 2 == 0:
        value -= capacity  # capacity 23 is odd: one generation earlier flips the parity
    return set_header(data, field, value), value


def assert_contract(buf: MixedReplayBuffer, tmp_path: pathlib.Path | None) -> None:
    """What every buffer a load returns must do: sample handles >= 0 that get() accepts, and (given a directory)
    survive save and load."""
    assert buf.check_invariants() == ""
    if len(buf):
        batch = buf.sample(64, 0.5)
        assert (batch.index >= 0).all(), batch.index
        again = buf.get(batch.index)
        np.testing.assert_array_equal(again.obs, batch.obs)
        assert (batch.action >= 0).all()
        assert np.isfinite(batch.obs).all() and np.isfinite(batch.next_obs).all()
        assert ((batch.weight > 0) & (batch.weight <= 1)).all()
    if tmp_path is None:
        return
    path = tmp_path / "resaved.replay"
    buf.save(path)
    assert MixedReplayBuffer.load(path).check_invariants() == ""


def test_adds_at_the_counter_limit_either_work_or_raise_overflow_and_saves_still_load(tmp_path: pathlib.Path):
    buf = filled(5)  # capacities 23 and 7: both rings have wrapped
    path = tmp_path / "buf.replay"
    buf.save(path)
    data, rl_written = near_the_limit(path.read_bytes(), "rl_written", 23, odd_room=True)
    data, _ = near_the_limit(data, "llm_written", 7, odd_room=False)
    path.write_bytes(data)
    near = MixedReplayBuffer.load(path)
    assert_contract(near, tmp_path)
    d = near.obs_dim
    handles, episode = [], 100
    o = np.zeros(d, np.float32)
    for _ in range((LIMIT - rl_written) // 2):  # fresh episodes: two positions each, up to 2**62 - 1
        handles.append(near.add_rl(o, 1, 0.0, o + 1, False, False, episode, 0))
    with pytest.raises(OverflowError, match=r"add_rl: 1 transition\(s\) need 2 more RL positions, but "
                                            r"4611686018427387903 of the 4611686018427387904 \(2\^62\) a handle "
                                            r"can address are written .* nothing was stored"):
        near.add_rl(o, 1, 0.0, o + 1, False, False, episode + 1, 0)
    state = near.rl_size
    # The last one still fits when it continues its episode (one position), and then nothing does.
    handles.append(near.add_rl(o + 1, 2, 0.0, o + 2, False, False, episode, 1))
    assert near.rl_size == state + 1
    with pytest.raises(OverflowError, match=r"add_rl: 1 transition\(s\) need 1 more RL positions, but "
                                            r"4611686018427387904 of the 4611686018427387904"):
        near.add_rl(o + 2, 3, 0.0, o + 3, False, False, episode, 2)
    with pytest.raises(OverflowError):
        near.add_rl_batch(np.zeros((2, d), np.float32), np.ones(2, np.int64), np.zeros(2), np.ones((2, d), np.float32),
                          np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, np.int64), np.zeros(2, np.int64))
    assert near.rl_size == state + 1  # a refused add stores nothing
    # Validated items: one position each, up to 2**62 exactly (the last handle is 2**63 - 1).
    while True:
        try:
            handles.append(near.add_validated(o, 0, 0.0, o, False, False, 0, 0, 0.5, True))
        except OverflowError as exc:
            assert "add_llm" in str(exc) and "LLM" in str(exc)
            break
        assert len(handles) < 40, "the validated counter never reached the limit"
    assert handles[-1] == 2**63 - 1
    assert min(handles) >= 0
    got = near.get(np.array(handles[-2:], np.int64))
    assert got.from_validated.all()
    assert_contract(near, tmp_path)  # samples, get, and a saved file at the limit that loads
    reloaded = MixedReplayBuffer.load(tmp_path / "resaved.replay")
    with pytest.raises(OverflowError):
        reloaded.add_validated(o, 0, 0.0, o, False, False, 0, 0, 0.5, True)


def test_a_file_with_a_write_counter_past_the_limit_is_refused_naming_it(tmp_path: pathlib.Path):
    buf = filled(5)
    path = tmp_path / "buf.replay"
    buf.save(path)
    data = path.read_bytes()
    written = struct.unpack_from("<Q", data, header_offset("rl_written"))[0]
    past = LIMIT + 1 + (written - LIMIT - 1) % buf.rl_capacity  # same slots, one generation past the limit
    path.write_bytes(set_header(data, "rl_written", past))
    with pytest.raises(ValueError, match=rf"buf\.replay': invalid header: write counters rl_written = {past}, "
                                         r"llm_written = \d+ out of range \[0, 4611686018427387904\] \(2\^62"):
        MixedReplayBuffer.load(path)


# ---- actions: a buffer's action set holds for adds and for the files it loads ---------------------------------


def test_num_actions_refuses_adds_outside_the_action_set_and_stores_nothing():
    buf = MixedReplayBuffer(2, 10, 4, num_actions=5)
    assert buf.num_actions == 5 and MixedReplayBuffer(2, 10, 4).num_actions is None
    o = np.zeros(2, np.float32)
    buf.add_rl(o, 4, 0.0, o + 1, False, False, 0, 0)
    with pytest.raises(ValueError, match=r"action\[0\] = 5 out of range \[0, 5\) for num_actions = 5"):
        buf.add_rl(o + 1, 5, 0.0, o + 2, False, False, 0, 1)
    with pytest.raises(ValueError, match=r"action\[0\] = 1099511627776 out of range \[0, 5\)"):
        buf.add_validated(o, 2**40, 0.0, o, False, False, 0, 0, 0.0, True)
    with pytest.raises(ValueError, match=r"action\[2\] = 7 out of range \[0, 5\)"):
        buf.add_rl_batch(np.zeros((3, 2), np.float32), np.array([0, 1, 7]), np.zeros(3), np.ones((3, 2), np.float32),
                         np.zeros(3, bool), np.zeros(3, bool), np.ones(3, np.int64), np.arange(3))
    assert (buf.rl_size, buf.validated_size) == (1, 0)
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"num_actions = {bad} out of range \[1, 9223372036854775807\]"):
            MixedReplayBuffer(2, 10, 4, num_actions=bad)


@pytest.mark.parametrize("partition", ["rl", "llm"])
def test_load_refuses_a_file_holding_an_action_outside_num_actions(tmp_path: pathlib.Path, partition: str):
    buf = MixedReplayBuffer(2, 10, 4)
    o = np.zeros(2, np.float32)
    buf.add_rl(o, 3, 0.0, o + 1, False, False, 0, 0)
    buf.add_validated(o, 3, 0.0, o, False, False, 0, 0, 0.0, True)
    if partition == "rl":
        buf.add_rl(o + 1, 2**63 - 1, 0.0, o + 2, False, False, 0, 1)  # slot 1: it continues the episode
        slot, big = 1, 2**63 - 1
    else:
        buf.add_validated(o, 2**40, 0.0, o, False, False, 0, 1, 0.0, True)
        slot, big = 1, 2**40
    path = tmp_path / "buf.replay"
    buf.save(path)
    assert MixedReplayBuffer.load(path).check_invariants() == ""  # without an action set: as before
    with pytest.raises(ValueError, match=rf"buf\.replay': {partition}\.action\[slot {slot}\] = {big} is not an action "
                                         r"of this buffer: out of range \[0, 4\) for num_actions = 4"):
        MixedReplayBuffer.load(path, num_actions=4)
    fits = min(big + 1, 2**63 - 1)  # the largest num_actions admits every action but 2**63 - 1
    if big < fits:
        loaded = MixedReplayBuffer.load(path, num_actions=fits)
        assert loaded.num_actions == fits and loaded.check_invariants() == ""


def test_load_refuses_a_file_of_another_observation_size(tmp_path: pathlib.Path):
    path = tmp_path / "buf.replay"
    MixedReplayBuffer(3, 10, 4).save(path)
    with pytest.raises(ValueError, match=r"buf\.replay' holds observations of size 3, not the obs_dim = 4 asked for"):
        MixedReplayBuffer.load(path, obs_dim=4)
    assert MixedReplayBuffer.load(path, obs_dim=3).obs_dim == 3


# ---- a fuzz over the header, checksum resealed ----------------------------------------------------------------


def header_variants(data: bytes) -> list[tuple[str, bytes]]:
    """Every single-bit flip of every header field after the magic string, and boundary values of the integer
    fields, each with the checksum recomputed as the writer would have."""
    blocks = layout(data)
    out = []

    def sealed(off: int, raw: bytes) -> bytes:
        b = bytearray(data)
        b[off:off + len(raw)] = raw
        b[-8:] = _checksum(bytes(b), blocks).to_bytes(8, "little")
        return bytes(b)

    off = 0
    for name, size in HEADER:
        if name != "magic":
            original = int.from_bytes(data[off:off + size], "little")
            values = {original ^ (1 << b) for b in range(8 * size)}
            if size == 8 and name not in ("alpha", "beta", "tau"):
                values |= {0, 1, 2, 3, original + 1, original - 1, 2**24, 2**40, LIMIT - 1, LIMIT, LIMIT + 1,
                           2**63 - 1, 2**64 - 1}
            for v in sorted(values):
                if 0 <= v < 2 ** (8 * size) and v != original:
                    out.append((f"{name}={v:#x}", sealed(off, v.to_bytes(size, "little"))))
        off += size
    for name, fill in (("alpha", float("nan")), ("beta", float("inf")), ("tau", 0.0), ("tau", -1.0), ("alpha", 1.5)):
        o = header_offset(name)
        out.append((f"{name}={fill}", sealed(o, struct.pack("<d", fill))))
    for written in ("rl_written", "llm_written"):  # whole generations later: every slot keeps its contents
        o = header_offset(written)
        capacity = 23 if written == "rl_written" else 7
        original = struct.unpack_from("<Q", data, o)[0]
        for target in (2**40, LIMIT - 1, LIMIT):
            value = target - (target - original) % capacity
            out.append((f"{written}={value:#x} (same slots)", sealed(o, value.to_bytes(8, "little"))))
    return out


def test_header_fuzz_gives_a_clean_error_or_a_buffer_that_keeps_its_contract(tmp_path: pathlib.Path):
    """Both rings of ``filled`` have wrapped, so no capacity or obs_dim change keeps the file's size: nothing here
    can make a load allocate more than a few MB (the subprocess tests above bound that)."""
    source = tmp_path / "buf.replay"
    filled(3).save(source)
    data = source.read_bytes()
    assert len(data) > HEADER_BYTES
    variants = header_variants(data)
    loaded = []
    saved_fields = set()
    for i, (name, variant) in enumerate(variants):
        path = tmp_path / f"variant-{i}.replay"  # a new file each time: rewriting one costs a flush on ext4
        path.write_bytes(variant)
        try:
            buf = MixedReplayBuffer.load(path)
        except ValueError as exc:
            assert f"'{path}'" in str(exc), (name, str(exc))
            continue
        field = name.split("=")[0]
        assert_contract(buf, None if field in saved_fields else tmp_path)  # save (an fsync) once per field
        saved_fields.add(field)
        loaded.append(name)
    # The fuzz reaches past the checks: generations moved, generator states, exponents that keep the leaves.
    assert len(variants) > 900
    assert any(n.startswith("rl_written") for n in loaded) and any(n.startswith("rng") for n in loaded), loaded
