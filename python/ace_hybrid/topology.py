"""Every single-substation bus-assignment action of a power grid, enumerated in C++.

The set and the order are those of Grid2Op's
``SerializableActionSpace.get_all_unitary_topologies_set(action_space, add_alone_line=...)`` (66,810 actions on
l2rpn_wcci_2020, 178 on l2rpn_case14_sandbox), built in about a millisecond instead of seconds. Each action is
stored as its substation and a bus pattern (one ``int8`` bus per element of that substation); full Grid2Op
``set_bus`` vectors are produced on demand.

The core needs no Grid2Op: :func:`bus_assignments_from_layout` takes the raw layout arrays.
:func:`bus_assignments` reads them from a Grid2Op environment or action space (any object whose class carries
``sub_info``, ``*_to_subid`` and ``*_to_sub_pos``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ace_hybrid import _core

__all__ = [
    "BusAssignmentSpace",
    "FootprintCSR",
    "bus_assignments",
    "bus_assignments_from_layout",
    "grid_layout",
]


class FootprintCSR(NamedTuple):
    """Which substation and which lines each action touches, as CSR arrays.

    ``substation_idx[substation_ptr[i]:substation_ptr[i + 1]]`` are the substations action ``i`` sets (one for a
    bus-assignment action), ``line_idx[line_ptr[i]:line_ptr[i + 1]]`` the distinct lines one of whose ends it
    sets (sorted).
    """

    substation_ptr: npt.NDArray[np.int64]
    """(n_actions + 1,) int64 pointer into substation_idx."""
    substation_idx: npt.NDArray[np.int32]
    """int32 substation ids."""
    line_ptr: npt.NDArray[np.int64]
    """(n_actions + 1,) int64 pointer into line_idx."""
    line_idx: npt.NDArray[np.int32]
    """int32 line ids."""


class BusAssignmentSpace:
    """The enumerated bus-assignment actions of one grid (a thin wrapper over ``_core.BusAssignmentActions``).

    Parameters
    ----------
    actions
        The compiled enumeration, as returned by ``_core.enumerate_bus_assignments``.
    """

    def __init__(self, actions: _core.BusAssignmentActions) -> None:
        self._actions = actions
        self._substation = actions.substation
        self._sub_offsets = actions.sub_offsets
        self._footprint: _core.ActionFootprint | None = None

    @property
    def core(self) -> _core.BusAssignmentActions:
        """The compiled object."""
        return self._actions

    @property
    def n_actions(self) -> int:
        """Number of actions."""
        return int(self._actions.n_actions)

    def __len__(self) -> int:
        return self.n_actions

    @property
    def n_sub(self) -> int:
        """Number of substations of the grid."""
        return int(self._actions.n_sub)

    @property
    def dim_topo(self) -> int:
        """Length of a ``set_bus`` vector."""
        return int(self._actions.dim_topo)

    @property
    def n_busbar_per_sub(self) -> int:
        """Busbars per substation used by the enumeration."""
        return int(self._actions.n_busbar_per_sub)

    @property
    def substation(self) -> npt.NDArray[np.int32]:
        """(n_actions,) int32 substation of each action (read-only view)."""
        view = self._substation.view()
        view.flags.writeable = False
        return view

    @property
    def sub_offsets(self) -> npt.NDArray[np.int64]:
        """(n_sub + 1,) int64: the actions of substation ``s`` are ``sub_offsets[s]:sub_offsets[s + 1]``."""
        view = self._sub_offsets.view()
        view.flags.writeable = False
        return view

    def pattern(self, i: int) -> npt.NDArray[np.int8]:
        """Bus pattern of action ``i``: (sub_info[substation[i]],) int8 with buses in 1..n_busbar_per_sub."""
        return self._actions.pattern(int(i))

    def set_bus(self, i: int) -> npt.NDArray[np.int8]:
        """Grid2Op ``set_bus`` vector of action ``i``: (dim_topo,) int8, 0 = untouched element.

        Raises
        ------
        IndexError
            If ``i`` is outside ``[-n_actions, n_actions)``.
        """
        return self._actions.set_bus(int(i))

    def set_bus_matrix(self, indices: npt.ArrayLike) -> npt.NDArray[np.int8]:
        """``set_bus`` vectors of several actions: 1-D integer ``indices`` -> (len(indices), dim_topo) int8."""
        return self._actions.set_bus_matrix(indices)

    def footprint(self) -> _core.ActionFootprint:
        """The compiled footprint (substations and lines touched), for :class:`ace_hybrid.masking.LegalityMasker`
        and for concatenation into a larger catalog with ``_core.ActionFootprint.concatenate``."""
        if self._footprint is None:
            self._footprint = _core.ActionFootprint.from_bus_assignments(self._actions)
        return self._footprint

    def footprint_csr(self) -> FootprintCSR:
        """Substations and lines touched by each action, as :class:`FootprintCSR` arrays."""
        fp = self.footprint()
        return FootprintCSR(fp.sub_ptr, fp.sub_idx, fp.bus_line_ptr, fp.bus_line_idx)

    def to_grid2op(self, action_space: Any, i: int) -> Any:
        """Action ``i`` as a Grid2Op action of ``action_space`` (``{"set_bus": set_bus(i)}``)."""
        return action_space({"set_bus": self.set_bus(i)})

    def __repr__(self) -> str:
        return (
            f"BusAssignmentSpace(n_actions={self.n_actions}, n_sub={self.n_sub}, "
            f"n_busbar_per_sub={self.n_busbar_per_sub})"
        )


def grid_layout(env_or_space: Any) -> _core.GridLayout:
    """The :class:`_core.GridLayout` of a Grid2Op environment, action space or observation space.

    Reads the class attributes ``sub_info``, ``{load,gen,line_or,line_ex,storage}_to_subid`` and ``*_to_sub_pos``
    (Grid2Op keeps them on the object's class); Grid2Op itself is not imported.

    Raises
    ------
    TypeError
        If the object carries no Grid2Op layout.
    """
    cls = env_or_space if isinstance(env_or_space, type) else type(env_or_space)
    if getattr(cls, "sub_info", None) is None or getattr(cls, "line_or_to_subid", None) is None:
        raise TypeError(
            f"{cls.__name__} carries no Grid2Op grid layout (sub_info / line_or_to_subid); pass a Grid2Op "
            "environment, action space or observation space"
        )

    def arr(name: str) -> npt.NDArray[np.int64]:
        value = getattr(cls, name, None)
        return np.zeros(0, dtype=np.int64) if value is None else np.asarray(value)

    return _core.GridLayout(
        arr("sub_info"),
        arr("load_to_subid"),
        arr("load_to_sub_pos"),
        arr("gen_to_subid"),
        arr("gen_to_sub_pos"),
        arr("line_or_to_subid"),
        arr("line_or_to_sub_pos"),
        arr("line_ex_to_subid"),
        arr("line_ex_to_sub_pos"),
        arr("storage_to_subid"),
        arr("storage_to_sub_pos"),
    )


def bus_assignments(
    env_or_space: Any,
    *,
    add_alone_line: bool = True,
    n_busbar_per_sub: int | None = None,
    max_actions: int = 20_000_000,
) -> BusAssignmentSpace:
    """All single-substation bus-assignment actions of a Grid2Op environment or action space.

    Same set and order as ``get_all_unitary_topologies_set(action_space, add_alone_line=add_alone_line)``.

    Parameters
    ----------
    env_or_space
        A Grid2Op environment, action space or observation space.
    add_alone_line
        Grid2Op's option: if False, every used bus must hold at least two elements.
    n_busbar_per_sub
        Busbars per substation; None reads the grid's ``n_busbar_per_sub`` (2 if it has none).
    max_actions
        Refuse (ValueError) to build more actions than this.
    """
    cls = env_or_space if isinstance(env_or_space, type) else type(env_or_space)
    if n_busbar_per_sub is None:
        n_busbar_per_sub = int(getattr(cls, "n_busbar_per_sub", 2))
    return BusAssignmentSpace(
        _core.enumerate_bus_assignments(
            grid_layout(env_or_space),
            n_busbar_per_sub=n_busbar_per_sub,
            add_alone_line=add_alone_line,
            max_actions=max_actions,
        )
    )


def bus_assignments_from_layout(
    sub_info: npt.ArrayLike,
    load_to_subid: npt.ArrayLike,
    load_to_sub_pos: npt.ArrayLike,
    gen_to_subid: npt.ArrayLike,
    gen_to_sub_pos: npt.ArrayLike,
    line_or_to_subid: npt.ArrayLike,
    line_or_to_sub_pos: npt.ArrayLike,
    line_ex_to_subid: npt.ArrayLike,
    line_ex_to_sub_pos: npt.ArrayLike,
    storage_to_subid: npt.ArrayLike | None = None,
    storage_to_sub_pos: npt.ArrayLike | None = None,
    *,
    n_busbar_per_sub: int = 2,
    add_alone_line: bool = True,
    max_actions: int = 20_000_000,
) -> BusAssignmentSpace:
    """All single-substation bus-assignment actions of a grid given by its raw layout.

    Parameters
    ----------
    sub_info
        (n_sub,) integers, number of elements per substation.
    load_to_subid, load_to_sub_pos, gen_to_subid, gen_to_sub_pos, line_or_to_subid, line_or_to_sub_pos, \
line_ex_to_subid, line_ex_to_sub_pos, storage_to_subid, storage_to_sub_pos
        1-D integers per element: its substation and its position inside the substation (Grid2Op's arrays of
        the same names). Storage may be None.
    n_busbar_per_sub, add_alone_line, max_actions
        As in :func:`bus_assignments`.

    Raises
    ------
    ValueError
        On a non-integer dtype, a wrong shape, two elements at one position or a position holding none.
    IndexError
        On a substation id or a position out of range.
    """
    layout = _core.GridLayout(
        sub_info,
        load_to_subid,
        load_to_sub_pos,
        gen_to_subid,
        gen_to_sub_pos,
        line_or_to_subid,
        line_or_to_sub_pos,
        line_ex_to_subid,
        line_ex_to_sub_pos,
        storage_to_subid,
        storage_to_sub_pos,
    )
    return BusAssignmentSpace(
        _core.enumerate_bus_assignments(
            layout, n_busbar_per_sub=n_busbar_per_sub, add_alone_line=add_alone_line, max_actions=max_actions
        )
    )
