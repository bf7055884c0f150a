"""The action catalog of a grid: every discrete action the agents choose from, by index.

Index layout (``kind``):

* ``0``: do nothing;
* ``1 + 2 l``: reconnect line ``l`` (set its status to +1), ``2 + 2 l``: disconnect line ``l`` (status -1) —
  by line status, not by setting both ends' buses (that variant is illegal whenever the line is connected);
* then every single-substation bus-assignment action, in grid2op's ``get_all_unitary_topologies_set`` order,
  enumerated in C++ (:mod:`ace_hybrid.topology`): 66,810 on the 36-substation grids.

Legality comes from the C++ :class:`~ace_hybrid.masking.LegalityMasker` over the whole catalog (microseconds per
observation). Grid2op actions are built on first use and cached, so no per-step ``from_vect``.
The catalog's arrays are cached on disk, keyed by a signature of the grid's layout, and rebuilt when it changes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ace_hybrid import _core
from ace_hybrid.files import atomic_write, cache_root
from ace_hybrid.masking import LegalityMasker
from ace_hybrid.topology import bus_assignments, grid_layout

DO_NOTHING, RECONNECT, DISCONNECT, BUS_ASSIGNMENT = 0, 1, 2, 3
KIND_NAMES = ("do nothing", "reconnect line", "disconnect line", "bus assignment")
_ELEMENT_NAMES = ("load", "generator", "line", "line", "storage")
_CATALOG_FORMAT = 1


def layout_signature(env_or_space: Any) -> str:
    """A short hash of everything the catalog depends on (layout, busbars per substation, format)."""
    layout = grid_layout(env_or_space)
    cls = env_or_space if isinstance(env_or_space, type) else type(env_or_space)
    h = hashlib.sha256()
    for arr in (layout.sub_info, layout.topo_kind, layout.topo_id, layout.sub_start):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(f"n_busbar={getattr(cls, 'n_busbar_per_sub', 2)};n_line={layout.n_line};v={_CATALOG_FORMAT}".encode())
    return h.hexdigest()[:16]


class ActionCatalog:
    """Every action of one grid, addressed by index.

    Parameters
    ----------
    env
        A Grid2Op environment (its action space builds the actions; its rules make the legal mask).
    cache_dir
        Where the catalog arrays are cached (``$ACE_HYBRID_CACHE/catalogs`` by default); None disables caching.
    """

    _instances: dict[tuple[int, str], "ActionCatalog"] = {}

    def __init__(self, env: Any, *, cache_dir: str | Path | None = "default") -> None:
        self.action_space = env.action_space
        self.n_line = int(env.n_line)
        self.n_sub = int(env.n_sub)
        self.signature = layout_signature(env.action_space)
        self.bus = bus_assignments(env.action_space)
        self.layout = self.bus.core.layout
        arrays = self._load_or_build(cache_dir)
        self.kind: npt.NDArray[np.int8] = arrays["kind"]
        self.line: npt.NDArray[np.int32] = arrays["line"]
        self.substation: npt.NDArray[np.int32] = arrays["substation"]
        self.n_bus2: npt.NDArray[np.int16] = arrays["n_bus2"]
        self._bus_offset = 1 + 2 * self.n_line
        footprint = _core.ActionFootprint.concatenate([
            _core.ActionFootprint.do_nothing(self.n_sub, self.n_line),
            _core.ActionFootprint.line_status(
                self.n_sub, self.n_line, np.repeat(np.arange(self.n_line), 2), np.tile([1, -1], self.n_line)),
            self.bus.footprint(),
        ])
        self.masker = LegalityMasker.for_env(env, footprint)
        self._actions: dict[int, Any] = {}
        self._pattern_index = self._index_current_patterns()

    @classmethod
    def for_env(cls, env: Any) -> "ActionCatalog":
        """The catalog of ``env``, shared by every caller in this process."""
        key = (id(type(env.action_space)), layout_signature(env.action_space))
        if key not in cls._instances:
            cls._instances[key] = cls(env)
        return cls._instances[key]

    # ------------------------------------------------------------------ construction and cache

    def _build_arrays(self) -> dict[str, np.ndarray]:
        n_bus, n_line = len(self.bus), self.n_line
        n = 1 + 2 * n_line + n_bus
        kind = np.empty(n, np.int8)
        kind[0] = DO_NOTHING
        kind[1 : 1 + 2 * n_line : 2] = RECONNECT
        kind[2 : 1 + 2 * n_line : 2] = DISCONNECT
        kind[1 + 2 * n_line :] = BUS_ASSIGNMENT
        line = np.full(n, -1, np.int32)
        line[1 : 1 + 2 * n_line] = np.repeat(np.arange(n_line, dtype=np.int32), 2)
        substation = np.full(n, -1, np.int32)
        substation[1 + 2 * n_line :] = self.bus.substation
        patterns = np.asarray(self.bus.core.patterns)
        offsets = np.asarray(self.bus.core.pattern_offsets)
        # Elements moved off bus 1 per action: the "size" of a split, used to rank candidates.
        on_other = (patterns != 1).astype(np.int16)
        n_bus2 = np.zeros(n, np.int16)
        n_bus2[1 + 2 * n_line :] = np.add.reduceat(on_other, offsets[:-1]) if n_bus else []
        return {"kind": kind, "line": line, "substation": substation, "n_bus2": n_bus2}

    def _load_or_build(self, cache_dir: str | Path | None) -> dict[str, np.ndarray]:
        if cache_dir is None:
            return self._build_arrays()
        if cache_dir == "default":
            cache_dir = cache_root() / "catalogs"
        path = Path(cache_dir) / f"catalog-{self.signature}.npz"
        try:
            with np.load(path) as data:
                arrays = {k: data[k] for k in ("kind", "line", "substation", "n_bus2")}
            if len(arrays["kind"]) == 1 + 2 * self.n_line + len(self.bus):
                return arrays
        except (OSError, KeyError, ValueError):
            pass  # missing or unreadable: rebuild
        arrays = self._build_arrays()
        atomic_write(path, lambda f: np.savez(f, **arrays))  # readers never see half a file
        return arrays

    # ------------------------------------------------------------------ index <-> grid2op action

    def __len__(self) -> int:
        return len(self.kind)

    def _check(self, i: int) -> int:
        if not 0 <= i < len(self):
            raise IndexError(f"action {i} out of range [0, {len(self)})")
        return int(i)

    def action(self, i: int) -> Any:
        """The grid2op action of index ``i`` (built once, then cached)."""
        i = self._check(i)
        act = self._actions.get(i)
        if act is None:
            k = self.kind[i]
            if k == DO_NOTHING:
                act = self.action_space({})
            elif k in (RECONNECT, DISCONNECT):
                act = self.action_space({"set_line_status": [(int(self.line[i]), 1 if k == RECONNECT else -1)]})
            else:
                act = self.action_space({"set_bus": self.bus.set_bus(i - self._bus_offset).astype(np.int32)})
            self._actions[i] = act
        return act

    def index_of(self, action: Any) -> int:
        """The catalog index of a grid2op action that is one of the catalog's (ValueError otherwise)."""
        status = np.asarray(action.line_set_status)
        set_bus = np.asarray(action.set_bus)
        touched_lines = np.flatnonzero(status)
        if not touched_lines.size and not set_bus.any():
            return 0
        if touched_lines.size == 1 and not set_bus.any():
            line = int(touched_lines[0])
            return 1 + 2 * line + (0 if status[line] > 0 else 1)
        subs = np.unique(np.searchsorted(self.layout.sub_start, np.flatnonzero(set_bus), side="right") - 1)
        if touched_lines.size == 0 and subs.size == 1:
            s = int(subs[0])
            lo, hi = self.layout.sub_start[s], self.layout.sub_start[s + 1]
            found = self._pattern_index[s].get(set_bus[lo:hi].astype(np.int8).tobytes())
            if found is not None:
                return self._bus_offset + found
        raise ValueError("this grid2op action is not in the catalog (not a single line-status or "
                         "single-substation bus-assignment action)")

    def _index_current_patterns(self) -> list[dict[bytes, int]]:
        offsets = self.bus.sub_offsets
        out: list[dict[bytes, int]] = []
        for s in range(self.n_sub):
            table: dict[bytes, int] = {}
            for j in range(int(offsets[s]), int(offsets[s + 1])):
                table[self.bus.pattern(j).astype(np.int8).tobytes()] = j
            out.append(table)
        return out

    # ------------------------------------------------------------------ masks

    def legal_mask(self, obs: Any, *, only_changes: bool = False) -> npt.NDArray[np.bool_]:
        """(n,) bool: the grid2op rules' verdict per action after ``obs``.

        With ``only_changes``, actions that would leave the grid as it is are masked too: reconnecting a connected
        line, disconnecting a disconnected one, and the bus assignment equal to a substation's current topology
        (up to renaming the buses). Do nothing always stays legal.
        """
        mask = self.masker.from_observation(obs)
        if only_changes:
            status = np.asarray(obs.line_status, dtype=bool)
            mask[1 : self._bus_offset : 2] &= ~status
            mask[2 : self._bus_offset : 2] &= status
            topo = np.asarray(obs.topo_vect)
            for s in range(self.n_sub):
                block = topo[self.layout.sub_start[s] : self.layout.sub_start[s + 1]]
                if block.min(initial=1) <= 0:
                    continue  # a disconnected element: every assignment reconnects it, so changes the grid
                found = self._pattern_index[s].get(_canonical(block).tobytes())
                if found is not None:
                    mask[self._bus_offset + found] = False
        mask[0] = True
        return mask

    def mask_batch(self, line_status: np.ndarray, cooldown_line: np.ndarray,
                   cooldown_sub: np.ndarray) -> npt.NDArray[np.bool_]:
        """(B, n) legal masks from line status and cooldowns (:meth:`LegalityMasker.mask_batch`)."""
        return self.masker.mask_batch(line_status, cooldown_line, cooldown_sub)

    # ------------------------------------------------------------------ features, text, shortlist

    def features(self) -> npt.NDArray[np.int8]:
        """(n, 4 + n_sub + n_line + dim_topo) int8: kind one-hot, substation one-hot, line one-hot, elements that a
        bus assignment puts on bus 2 or higher. Compact; cast to float for a network's action embedding."""
        n, dim_topo = len(self), int(self.layout.dim_topo)
        out = np.zeros((n, 4 + self.n_sub + self.n_line + dim_topo), np.int8)
        out[np.arange(n), self.kind] = 1
        bus = self.kind == BUS_ASSIGNMENT
        out[np.flatnonzero(bus), 4 + self.substation[bus]] = 1
        lines = self.line >= 0
        out[np.flatnonzero(lines), 4 + self.n_sub + self.line[lines]] = 1
        if len(self.bus):
            set_bus = self.bus.set_bus_matrix(np.arange(len(self.bus)))
            out[self._bus_offset :, 4 + self.n_sub + self.n_line :] = set_bus >= 2
        return out

    def describe(self, i: int) -> str:
        """T_a: action ``i`` in words, e.g. ``"substation 16: load 3 and line 7 (origin) to bus 2; the rest stay on
        bus 1"``."""
        i = self._check(i)
        k = self.kind[i]
        if k == DO_NOTHING:
            return "do nothing"
        if k in (RECONNECT, DISCONNECT):
            return f"{'reconnect' if k == RECONNECT else 'disconnect'} line {self.line[i]}"
        s = int(self.substation[i])
        pattern = self.bus.pattern(i - self._bus_offset)
        lo = int(self.layout.sub_start[s])
        kinds, ids = self.layout.topo_kind[lo : lo + len(pattern)], self.layout.topo_id[lo : lo + len(pattern)]
        groups = []
        for b in range(2, int(pattern.max()) + 1):
            names = [_element_name(int(kinds[j]), int(ids[j])) for j in np.flatnonzero(pattern == b)]
            groups.append(f"{_join(names)} to bus {b}")
        return f"substation {s}: " + "; ".join(groups) + "; the rest stay on bus 1"

    def shortlist(self, obs: Any, k: int) -> npt.NDArray[np.int64]:
        """Up to ``k`` legal, topology-changing candidates ranked by a cheap heuristic (do nothing excluded).

        Reconnections first; then bus assignments at the substations at the ends of overloaded or nearly
        overloaded lines (most loaded first), small splits (fewest elements moved) first within a substation.
        """
        if k <= 0:
            raise ValueError(f"k = {k} out of range [1, inf)")
        legal = self.legal_mask(obs, only_changes=True)
        out = [i for i in range(1, self._bus_offset, 2) if legal[i]]
        rho = np.asarray(obs.rho)
        trouble = np.argsort(-rho, kind="stable")[: max(1, int((rho >= 0.8).sum()))]
        subs: list[int] = []
        for line in trouble:
            for s in (int(self.layout_line_or_sub[line]), int(self.layout_line_ex_sub[line])):
                if s not in subs:
                    subs.append(s)
        per_sub = max(1, -(-(k - len(out)) // max(1, len(subs))))
        offsets = self.bus.sub_offsets
        for s in subs:
            idx = np.arange(int(offsets[s]), int(offsets[s + 1])) + self._bus_offset
            idx = idx[legal[idx]]
            order = np.lexsort((idx, self.n_bus2[idx]))
            out.extend(int(x) for x in idx[order[:per_sub]])
        return np.asarray(out[:k], dtype=np.int64)

    @property
    def layout_line_or_sub(self) -> npt.NDArray[np.int64]:
        return np.asarray(type(self.action_space).line_or_to_subid)

    @property
    def layout_line_ex_sub(self) -> npt.NDArray[np.int64]:
        return np.asarray(type(self.action_space).line_ex_to_subid)

    def __repr__(self) -> str:
        return (f"ActionCatalog({len(self):,} actions: 1 do-nothing, {2 * self.n_line} line status, "
                f"{len(self.bus):,} bus assignments; signature {self.signature})")


def _canonical(block: np.ndarray) -> np.ndarray:
    """Rename buses in order of first appearance (1, 2, ...), as the enumeration numbers them."""
    out = np.empty(len(block), np.int8)
    names: dict[int, int] = {}
    for j, b in enumerate(block):
        out[j] = names.setdefault(int(b), len(names) + 1)
    return out


def _element_name(kind: int, element: int) -> str:
    suffix = " (origin)" if kind == 2 else " (extremity)" if kind == 3 else ""
    return f"{_ELEMENT_NAMES[kind]} {element}{suffix}"


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
