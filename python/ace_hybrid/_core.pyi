# generated with pybind11 3.1.0 by `make stubs`; do not edit
"""
ace_hybrid compiled core: mixed prioritised replay, action enumeration, legality masks
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['ActionFootprint', 'BusAssignmentActions', 'GridLayout', 'LegalityMasker', 'MixedReplay', 'SamplingGenerator', 'argmax_masked_logits', 'build_info', 'enumerate_bus_assignments', 'sample_masked_logits', 'topk_masked_logits']
class MixedReplay:
    """
    Mixed prioritised replay (C++ core of ace_hybrid.replay.MixedReplayBuffer; use that class).
    
    Two FIFO partitions: RL transitions (each observation stored once; a transition's next observation is the
    next stored observation of its episode) sampled by proportional prioritised replay (priority^alpha), and
    validated transitions (LLM refinements, tutor decisions) sampled with probability proportional to
    I_v * exp((r_hat - r) / tau) (ACE, Eq. 8). The C++ core calls the validated partition "llm" (add_llm,
    ReplayConfig::llm_capacity, the file's llm.* columns); Python sees validated_* names.
    Thread-safe for concurrent writer and sampler threads; batched calls release the GIL.
    """
    def __init__(self, obs_dim: typing.SupportsInt | typing.SupportsIndex, rl_capacity: typing.SupportsInt | typing.SupportsIndex, validated_capacity: typing.SupportsInt | typing.SupportsIndex, *, alpha: typing.SupportsFloat | typing.SupportsIndex = 0.6, beta: typing.SupportsFloat | typing.SupportsIndex = 0.25, tau: typing.SupportsFloat | typing.SupportsIndex = 1.0, seed: typing.Any = 0, num_actions: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
        """
        Allocates both partitions. obs_dim >= 1, rl_capacity >= 3 observation slots, validated_capacity >= 1 items, alpha in [0, 1] (priority exponent), beta in [0, 1] (validated fraction of a batch), tau in [1e-6, 1e6] (Eq. 8 temperature), seed in [0, 2^64), num_actions None (any action >= 0) or in [1, 2^63 - 1] (adds and loaded files must hold actions in [0, num_actions)).
        """
    def __len__(self) -> int:
        """
        Live RL transitions + live validated items with I_v = 1 (the N of the importance weights).
        """
    def _get(self, index: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]) -> tuple:
        """
        Copies the items named by handles; the 14 ReplayBatch columns as a tuple.
        """
    def _load(self, path: str) -> None:
        """
        Replaces this buffer's whole state with the file's, format version 2 or 3 (use MixedReplayBuffer.load); the buffer keeps its num_actions. Verifies the size and the checksum before allocating the capacities the header declares. ValueError naming the file and the problem (for contents: the column, slot and value; for an allocation that fails: the column, the header field and the bytes) for a bad file (this buffer is then unchanged); OSError if unreadable.
        """
    def _rl_columns(self) -> dict:
        """
        Live RL transitions, oldest first, as a dict of (n,) arrays.
        """
    def _sample(self, batch_size: typing.SupportsInt | typing.SupportsIndex, is_exponent: typing.SupportsFloat | typing.SupportsIndex = 0.4) -> tuple:
        """
        Samples a batch; returns the 14 columns of ReplayBatch as a tuple (use MixedReplayBuffer.sample).
        """
    def _tree_snapshot(self) -> dict:
        """
        Copies of the sum-tree leaves and roots and the RL priorities (tests and diagnostics).
        """
    def add_rl(self, obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], action: typing.SupportsInt | typing.SupportsIndex, reward: typing.SupportsFloat | typing.SupportsIndex, next_obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], done: bool, truncated: bool, episode: typing.SupportsInt | typing.SupportsIndex, decision: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        Adds one RL transition; returns its handle (int). obs, next_obs: (obs_dim,) float32; action >= 0 (and < num_actions if set); episode, decision in [0, 2^31 - 1] (decision: the index of the agent's decision within its episode); done, truncated: bool (or numpy.bool_). Continues the stored episode (one new observation slot) when episode matches, decision is the previous decision + 1, the previous transition was neither done nor truncated and obs equals the stored next observation bit for bit; otherwise uses two new slots. OverflowError, storing nothing, if the partition's write counter would pass 2^62 (the positions a handle can address).
        """
    def add_rl_batch(self, obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], action: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], reward: typing.Annotated[numpy.typing.ArrayLike, numpy.float64], next_obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], done: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], truncated: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], episode: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], decision: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]) -> numpy.typing.NDArray[numpy.int64]:
        """
        Adds n RL transitions in order (same rules as add_rl); returns their handles, (n,) int64. obs, next_obs: (n, obs_dim) float32; action, episode, decision: (n,) integer; reward: (n,) float; done, truncated: (n,) bool. Nothing is stored if any argument is invalid.
        """
    def add_validated(self, obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], action: typing.SupportsInt | typing.SupportsIndex, reward: typing.SupportsFloat | typing.SupportsIndex, next_obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], done: bool, truncated: bool, episode: typing.SupportsInt | typing.SupportsIndex, decision: typing.SupportsInt | typing.SupportsIndex, improvement: typing.SupportsFloat | typing.SupportsIndex, valid: bool) -> int:
        """
        Adds one validated transition (an LLM refinement, a tutor decision) with its improvement r_hat - r and validation flag I_v; returns its handle. Sampled with weight valid * exp(clip(improvement / tau, -60, 60)); invalid items are never sampled.
        """
    def add_validated_batch(self, obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], action: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], reward: typing.Annotated[numpy.typing.ArrayLike, numpy.float64], next_obs: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], done: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], truncated: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], episode: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], decision: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], improvement: typing.Annotated[numpy.typing.ArrayLike, numpy.float64], valid: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]]) -> numpy.typing.NDArray[numpy.int64]:
        """
        Adds n validated transitions (columns as in add_rl_batch plus improvement (n,) float and valid (n,) bool); returns their handles, (n,) int64.
        """
    def check_invariants(self) -> str:
        """
        '' if the buffer is consistent (the checks load applies: stored values an add accepts, trees equal their rebuilds, leaves match priorities and I_v, counters match), else a description. O(capacity * obs_dim).
        """
    def get_rng_state(self) -> tuple[int, int, int, int]:
        """
        The generator state (xoshiro256**), a tuple of 4 ints in [0, 2^64).
        """
    def save(self, path: str) -> None:
        """
        Writes the buffer (configuration, pointers, generator state and the slots in use with their priorities; never the unused capacity) to path atomically (temporary file, fsync, rename) with a versioned header and a checksum. OSError if it cannot be written.
        """
    def set_rng_state(self, state: tuple) -> None:
        """
        Restores a state from get_rng_state(); ValueError for out-of-range or all-zero words.
        """
    def update_priorities(self, index: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], priority: typing.Annotated[numpy.typing.ArrayLike, numpy.float64]) -> int:
        """
        Sets the priorities (n,) float (finite, >= 0, stored as float32) of the RL items named by index (n,) int64, in order (a repeated handle keeps its last priority). Returns how many were applied: stale handles (slot overwritten since sampling) and validated handles (Eq. 8 weights do not use priorities) are skipped. Raises ValueError / IndexError, changing nothing, on a bad priority or a never-issued handle.
        """
    def update_rewards(self, index: numpy.ndarray[typing.Any, numpy.dtype[typing.Any]], reward: typing.Annotated[numpy.typing.ArrayLike, numpy.float64]) -> int:
        """
        Replaces the rewards of the items named by index (RL or validated) with reward (n,) float, keeping original_reward (the LLM critic's shaping). Returns how many were applied (stale handles are skipped).
        """
    @property
    def alpha(self) -> float:
        """
        Priority exponent.
        """
    @property
    def beta(self) -> float:
        """
        Nominal validated fraction of a batch.
        """
    @property
    def max_priority(self) -> float:
        """
        Priority a new RL transition gets now: the maximum over live RL transitions, or 1.0 if none is positive.
        """
    @property
    def nbytes(self) -> int:
        """
        Bytes allocated by both partitions (what load() allocates for a file of these capacities).
        """
    @property
    def num_actions(self) -> int | None:
        """
        The action limit given to the constructor (actions must be in [0, num_actions)), or None.
        """
    @property
    def obs_dim(self) -> int:
        """
        Observation dimension D.
        """
    @property
    def rl_capacity(self) -> int:
        """
        Observation slots of the RL partition.
        """
    @property
    def rl_nbytes(self) -> int:
        """
        Bytes allocated by the RL partition (observations, columns and trees).
        """
    @property
    def rl_size(self) -> int:
        """
        Live RL transitions.
        """
    @property
    def tau(self) -> float:
        """
        Eq. 8 temperature.
        """
    @property
    def validated_capacity(self) -> int:
        """
        Items of the validated partition.
        """
    @property
    def validated_size(self) -> int:
        """
        Live items of the validated partition, valid or not.
        """
    @property
    def validated_valid_size(self) -> int:
        """
        Live items of the validated partition with I_v = 1.
        """
class GridLayout:
    """
    Which element (load, generator, line origin / extremity, storage unit) sits at which
    position of which substation: Grid2Op's sub_info, *_to_subid and *_to_sub_pos. The
    topology vector holds the substations one after the other (sub_start).
    """
    def __init__(self, sub_info: typing.Any, load_to_subid: typing.Any, load_to_sub_pos: typing.Any, gen_to_subid: typing.Any, gen_to_sub_pos: typing.Any, line_or_to_subid: typing.Any, line_or_to_sub_pos: typing.Any, line_ex_to_subid: typing.Any, line_ex_to_sub_pos: typing.Any, storage_to_subid: typing.Any = None, storage_to_sub_pos: typing.Any = None) -> None:
        """
        Build from 1-D integer arrays (None = no element of that kind). Raises ValueError on a dtype,
        shape or consistency problem (two elements at one position, a position holding none) and
        IndexError on a substation id or position out of range.
        """
    def __repr__(self) -> str:
        ...
    @property
    def dim_topo(self) -> int:
        """
        Length of the topology vector (sum of sub_info).
        """
    @property
    def line_ex_pos_topo_vect(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_line,) int32 topology position of each line extremity.
        """
    @property
    def line_or_pos_topo_vect(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_line,) int32 topology position of each line origin.
        """
    @property
    def n_line(self) -> int:
        """
        Number of lines.
        """
    @property
    def n_sub(self) -> int:
        """
        Number of substations.
        """
    @property
    def sub_info(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_sub,) int32 number of elements per substation.
        """
    @property
    def sub_start(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_sub + 1,) int32 first topology position of each substation, then dim_topo.
        """
    @property
    def topo_id(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (dim_topo,) int32 id of the element (within its kind) per topology position.
        """
    @property
    def topo_kind(self) -> numpy.typing.NDArray[numpy.int8]:
        """
        (dim_topo,) int8 element kind per topology position: 0 load, 1 gen, 2 line origin,
        3 line extremity, 4 storage.
        """
class BusAssignmentActions:
    """
    Every single-substation bus-assignment (set_bus) action of a grid, in Grid2Op's
    order (get_all_unitary_topologies_set): per action its substation and its bus
    pattern (one int8 bus in 1..n_busbar_per_sub per element of the substation).
    """
    def __len__(self) -> int:
        ...
    def __repr__(self) -> str:
        ...
    def pattern(self, i: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int8]:
        """
        Bus pattern of action i: (sub_info[substation[i]],) int8 in 1..n_busbar_per_sub. IndexError if i is
        outside [-n_actions, n_actions).
        """
    def set_bus(self, i: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int8]:
        """
        Grid2Op set_bus vector of action i: (dim_topo,) int8, 0 = untouched, else the bus. IndexError if i is
        outside [-n_actions, n_actions).
        """
    def set_bus_matrix(self, indices: typing.Any) -> numpy.typing.NDArray[numpy.int8]:
        """
        set_bus vectors of the actions `indices` (1-D integers, negative counted from the end):
        (len(indices), dim_topo) int8. IndexError names the first index out of range.
        """
    def sub_patterns(self, substation: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int8]:
        """
        All bus patterns of one substation: (n_actions of it, sub_info[substation]) int8. IndexError if the
        substation is outside [0, n_sub).
        """
    @property
    def add_alone_line(self) -> bool:
        """
        Whether a bus may hold a single element (Grid2Op's add_alone_line).
        """
    @property
    def dim_topo(self) -> int:
        """
        Length of a set_bus vector.
        """
    @property
    def layout(self) -> GridLayout:
        """
        A copy of the GridLayout enumerated.
        """
    @property
    def n_actions(self) -> int:
        """
        Number of actions.
        """
    @property
    def n_busbar_per_sub(self) -> int:
        """
        Busbars per substation used for the enumeration.
        """
    @property
    def n_sub(self) -> int:
        """
        Number of substations of the grid.
        """
    @property
    def pattern_offsets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_actions + 1,) int64 offsets into patterns.
        """
    @property
    def patterns(self) -> numpy.typing.NDArray[numpy.int8]:
        """
        Flat int8 bus patterns; action i's is patterns[pattern_offsets[i]:pattern_offsets[i+1]].
        """
    @property
    def sub_offsets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_sub + 1,) int64: the actions of substation s are sub_offsets[s]:sub_offsets[s+1].
        """
    @property
    def substation(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_actions,) int32 substation of each action.
        """
class ActionFootprint:
    """
    What each action of a catalog touches, as Grid2Op's legality rules see it (CSR):
      substation entries sub_ptr[a]:sub_ptr[a+1] -> sub_idx (substation), sub_sets_other (a load / gen /
      storage of it gets a bus), sub_line_idx[sub_line_ptr[e]:sub_line_ptr[e+1]] (lines with an end set there);
      status entries status_ptr[a]:status_ptr[a+1] -> status_idx (line), status_val (+1 reconnect, -1 disconnect).
    Bus-assignment actions have one substation entry, line-status actions one status entry, do-nothing none;
    build a catalog with ActionFootprint.concatenate. Immutable.
    """
    @staticmethod
    def concatenate(parts: collections.abc.Sequence) -> ActionFootprint:
        """
        The actions of `parts` one after the other (ValueError if empty or if n_sub / n_line differ).
        """
    @staticmethod
    def do_nothing(n_sub: typing.SupportsInt | typing.SupportsIndex, n_line: typing.SupportsInt | typing.SupportsIndex, count: typing.SupportsInt | typing.SupportsIndex = 1) -> ActionFootprint:
        """
        `count` do-nothing actions (empty footprints).
        """
    @staticmethod
    def from_bus_assignments(actions: BusAssignmentActions) -> ActionFootprint:
        """
        Footprint of enumerated bus-assignment actions: one substation entry per action (sets a load / gen /
        storage iff the substation has one; its lines = every line with an end there).
        """
    @staticmethod
    def line_status(n_sub: typing.SupportsInt | typing.SupportsIndex, n_line: typing.SupportsInt | typing.SupportsIndex, line_ids: typing.Any, values: typing.Any) -> ActionFootprint:
        """
        One action per k: set the status of line line_ids[k] to values[k] (+1 reconnect, -1 disconnect).
        """
    def __init__(self, n_sub: typing.SupportsInt | typing.SupportsIndex, n_line: typing.SupportsInt | typing.SupportsIndex, sub_ptr: typing.Any, sub_idx: typing.Any, sub_sets_other: typing.Any, sub_line_ptr: typing.Any, sub_line_idx: typing.Any, status_ptr: typing.Any, status_idx: typing.Any, status_val: typing.Any) -> None:
        """
        Build from 1-D integer CSR arrays (see the class docstring). ValueError on a dtype / shape / pointer
        problem, a substation twice in one action, a status value not in {-1, +1}; IndexError on an id
        outside [0, n_sub) / [0, n_line).
        """
    def __len__(self) -> int:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def bus_line_idx(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        int32 distinct lines (sorted) one of whose ends each action sets.
        """
    @property
    def bus_line_ptr(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_actions + 1,) int64 CSR pointer into bus_line_idx.
        """
    @property
    def group_of(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_actions,) int32 group of each action.
        """
    @property
    def n_actions(self) -> int:
        """
        Number of actions.
        """
    @property
    def n_groups(self) -> int:
        """
        Number of distinct footprints (actions of one group are equally legal).
        """
    @property
    def n_line(self) -> int:
        """
        Number of lines.
        """
    @property
    def n_sub(self) -> int:
        """
        Number of substations.
        """
    @property
    def status_idx(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        int32 line of each status entry.
        """
    @property
    def status_ptr(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_actions + 1,) int64 CSR pointer into the status entries.
        """
    @property
    def status_val(self) -> numpy.typing.NDArray[numpy.int8]:
        """
        int8 value of each status entry: +1 reconnect, -1 disconnect.
        """
    @property
    def sub_idx(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        (n_entries,) int32 substation of each substation entry.
        """
    @property
    def sub_line_idx(self) -> numpy.typing.NDArray[numpy.int32]:
        """
        int32 lines with an end set at each substation entry.
        """
    @property
    def sub_line_ptr(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_entries + 1,) int64 CSR pointer into sub_line_idx.
        """
    @property
    def sub_ptr(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        (n_actions + 1,) int64 CSR pointer into the substation entries.
        """
    @property
    def sub_sets_other(self) -> numpy.typing.NDArray[numpy.bool]:
        """
        (n_entries,) bool: the entry sets a load, generator or storage unit.
        """
class LegalityMasker:
    """
    Grid2Op's legality verdict (DefaultRules / RulesByArea: line and substation cooldowns, MAX_SUB_CHANGED,
    MAX_LINE_STATUS_CHANGED, setting a bus on a disconnected line = reconnecting it) for every action of a
    footprint at once. Each distinct footprint is evaluated once per observation, then broadcast. Immutable;
    mask / mask_batch are thread-safe. Grid2Op also calls every action legal while env.nb_time_step <= 0:
    that is left to the caller.
    """
    def __init__(self, footprint: ActionFootprint, max_sub_changed: typing.SupportsInt | typing.SupportsIndex = 1, max_line_status_changed: typing.SupportsInt | typing.SupportsIndex = 1, sub_area: typing.Any = None, line_area: typing.Any = None, check_limits: bool = True, check_cooldowns: bool = True) -> None:
        """
        Copy the footprint and the rules. max_*: Grid2Op's Parameters.MAX_SUB_CHANGED /
        MAX_LINE_STATUS_CHANGED (>= 0). sub_area (n_sub,) / line_area (n_line,): area ids for RulesByArea
        (limits then apply per area; Grid2Op puts a line in its origin's area), None = one area.
        check_limits=False drops the counting rule (PreventReconnection alone), check_cooldowns=False the
        cooldown rule (LookParam alone).
        """
    def __repr__(self) -> str:
        ...
    def group_mask(self, line_status: typing.Any, cooldown_line: typing.Any, cooldown_sub: typing.Any) -> numpy.typing.NDArray[numpy.bool]:
        """
        Legality of each distinct footprint (n_groups,) bool; mask == group_mask[footprint.group_of].
        """
    def mask(self, line_status: typing.Any, cooldown_line: typing.Any, cooldown_sub: typing.Any) -> numpy.typing.NDArray[numpy.bool]:
        """
        Legal mask for one observation: line_status (n_line,) bool (or 0/1 ints), cooldown_line (n_line,)
        and cooldown_sub (n_sub,) non-negative ints (obs.time_before_cooldown_line / _sub) ->
        (n_actions,) bool. ValueError on a dtype, shape or value problem.
        """
    def mask_batch(self, line_status: typing.Any, cooldown_line: typing.Any, cooldown_sub: typing.Any) -> numpy.typing.NDArray[numpy.bool]:
        """
        Legal masks for B observations: line_status (B, n_line), cooldown_line (B, n_line), cooldown_sub
        (B, n_sub) -> (B, n_actions) bool. Releases the GIL.
        """
    @property
    def footprint(self) -> ActionFootprint:
        """
        The ActionFootprint masked (a view kept alive by the masker).
        """
    @property
    def max_line_status_changed(self) -> int:
        """
        Line statuses an action may change (per area).
        """
    @property
    def max_sub_changed(self) -> int:
        """
        Substations an action may change (per area).
        """
    @property
    def n_actions(self) -> int:
        """
        Number of actions masked.
        """
    @property
    def n_area(self) -> int:
        """
        Number of areas (1 = DefaultRules).
        """
class SamplingGenerator:
    """
    Seedable random generator for the masked samplers: xoshiro256** seeded through splitmix64 (256-bit state, period 2^256 - 1).
    
    Not thread-safe: use one generator per thread. Its state can be read and restored (get_state / set_state) and it pickles, so runs can be checkpointed and replayed.
    """
    def __getstate__(self) -> tuple:
        ...
    def __init__(self, seed: typing.Any) -> None:
        """
        Creates a generator from an integer seed in [0, 2^64).
        """
    def __repr__(self) -> str:
        ...
    def __setstate__(self, arg0: tuple) -> None:
        ...
    def get_state(self) -> tuple:
        """
        The 256-bit state as a tuple of four integers in [0, 2^64).
        """
    def set_state(self, state: typing.Any) -> None:
        """
        Restores a state from get_state(): four integers in [0, 2^64), not all zero.
        """
    def uniform(self, size: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.float64]:
        """
        Draws `size` float64 values uniform in [0, 1) (53 random bits each), advancing the state. The samplers draw exactly one such value per row.
        """
def argmax_masked_logits(logits: typing.Any, mask: typing.Any, on_empty: str = 'error', fallback_index: typing.SupportsInt | typing.SupportsIndex = 0, num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> numpy.typing.NDArray[numpy.int64]:
    """
    Index of the largest legal logit per row; ties go to the lowest index (-0.0 ties with +0.0).
    
    Arguments and errors as sample_masked_logits (no generator, no temperature). Returns int64 (batch,).
    """
def build_info() -> dict:
    """
    How the extension was compiled: version, compiler, C++ standard, build type, flags, sanitizers.
    """
def enumerate_bus_assignments(layout: GridLayout, n_busbar_per_sub: typing.SupportsInt | typing.SupportsIndex = 2, add_alone_line: bool = True, max_actions: typing.SupportsInt | typing.SupportsIndex = 20000000) -> BusAssignmentActions:
    """
    Enumerate every single-substation bus-assignment action of `layout` exactly as Grid2Op's
    get_all_unitary_topologies_set(action_space, add_alone_line=...) does (same set, same order):
    restricted-growth bus labels (first element on bus 1), at least one line end per used bus, optionally
    two elements per bus, substations with fewer than two topologies dropped. ValueError if
    n_busbar_per_sub is outside [1, 127] or more than max_actions actions would be built. Releases the GIL.
    """
def sample_masked_logits(logits: typing.Any, mask: typing.Any, generator: SamplingGenerator, temperature: typing.SupportsFloat | typing.SupportsIndex = 1.0, on_empty: str = 'error', fallback_index: typing.SupportsInt | typing.SupportsIndex = 0, num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.bool]]:
    """
    Draws one action per row with probability softmax(logits / temperature) over the legal actions.
    
    logits: float32 (batch, n), 1 <= n < 2^31. mask: bool or uint8, (n,) shared by all rows or (batch, n); nonzero = legal; None = all legal. A legal -inf logit has probability 0; NaN or +inf at a legal position is a ValueError naming row and column. temperature in [1e-30, 1e30]. on_empty: "error" (ValueError naming the first row with no legal finite logit) or "index" (such rows return fallback_index, in [0, n), with log-probability 0). num_threads: 0 = automatic, else 1..256; results do not depend on it.
    Consumes one generator draw per row, in row order; a call that raises leaves the generator unchanged.
    Returns (actions int64 (batch,), log_probs float64 (batch,), empty bool (batch,)).
    """
def topk_masked_logits(logits: typing.Any, mask: typing.Any, k: typing.SupportsInt | typing.SupportsIndex, on_empty: str = 'error', fallback_index: typing.SupportsInt | typing.SupportsIndex = 0, num_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.float32]]:
    """
    The k legal actions with the largest finite logits per row, best first; ties go to the lowest index.
    
    k in [1, n]. A row with fewer than k legal finite logits is a ValueError naming it (on_empty="error"), or its missing slots hold fallback_index with value -inf (on_empty="index"). Other arguments and errors as argmax_masked_logits. Returns (indices int64 (batch, k), values float32 (batch, k)).
    """
