"""Training, validation and test weeks of a generated set, by week number: held out by week, never by seed alone.

Week k goes to the split :data:`PATTERN` gives its residue k mod 7: 4 of every 7 weeks train, 1 validates, 2 test
(28 weeks: 16 / 4 / 8). The split of a week never depends on the checks or on how many weeks the set has, so a test
week stays a test week when the set grows; weeks are spread over the year (:mod:`ace_hybrid.data.weeks`), and so is
every residue class. A week that failed its checks (or could not be generated) is left out of its split, with the
reason, never moved to another. Experiments read ``splits.json``: test weeks are never trained on nor used for a
choice (checkpoint selection and every configuration choice use validation weeks), as the L2RPN competitions kept
their test scenarios hidden.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ace_hybrid.data.sets import GeneratedSet
from ace_hybrid.files import atomic_write_json

__all__ = ["PATTERN", "SPLITS", "check_split_use", "make_weeks_command", "read_splits", "split_of", "write_splits"]

#: The split of week k is PATTERN[k % 7].
PATTERN = ("train", "train", "test", "train", "train", "test", "validation")
SPLITS = ("train", "validation", "test")


def split_of(week: int) -> str:
    """The split week number ``week`` belongs to (before its checks)."""
    if week < 0:
        raise ValueError(f"week = {week} must be >= 0")
    return PATTERN[week % len(PATTERN)]


def write_splits(dataset: GeneratedSet, checks: dict[str, Any]) -> dict[str, Any]:
    """Write ``splits.json`` from the checks: each split's usable weeks, and every left-out week with its reason."""
    flagged: dict[str, str] = {}
    splits: dict[str, list[int]] = {s: [] for s in SPLITS}
    for k, name in sorted(dataset.weeks().items()):
        record = checks["weeks"].get(name)
        if record is None:
            flagged[str(k)] = "not checked yet (ace-hybrid data check)"
        elif record["problems"]:
            flagged[str(k)] = "; ".join(record["problems"])
        else:
            splits[split_of(k)].append(k)
    for name, error in dataset.failed().items():
        flagged[str(int(name.split("_", 1)[0]))] = f"not generated: {error}"
    out = {"rule": "week k is in PATTERN[k % 7]; a flagged week is left out of its split", "pattern": list(PATTERN),
           **splits, "flagged": dict(sorted(flagged.items(), key=lambda kv: int(kv[0])))}
    atomic_write_json(dataset.path / "splits.json", out)
    return out


def read_splits(dataset: GeneratedSet) -> dict[str, Any]:
    """The set's ``splits.json``; ``FileNotFoundError`` saying how to make it."""
    import json

    path = dataset.path / "splits.json"
    if not path.is_file():
        raise FileNotFoundError(f"{dataset.path} has no splits.json: run ace-hybrid data check {dataset.path}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_split_use(data: str, uses: list[tuple[str, str, list[int]]], *, unplayed: Collection[str] = ()) -> None:
    """Check that each use of the set ``data`` takes only weeks of its split.

    ``uses`` holds (what, split, scenario ids), e.g. ("test_pairs", "test", [...]), ("env.train_scenarios",
    "train", [...]). The uses named in ``unplayed`` (an experiment's test pairs while it plays its validation
    pairs) may name weeks not generated yet, of their split by :func:`split_of` (``generate --split`` makes some
    splits only); a flagged week is refused there too. Raises ``ValueError`` naming the use, the week and the split
    it is in (or why it was left out), or the weeks of the right split the other uses need that are not generated
    yet, with the command that makes them; ``FileNotFoundError`` when ``data`` is not a generated set or has not
    been checked. Folders that are not generated sets (a full dataset) have no splits and are not checked here.
    """
    from ace_hybrid.data.sets import find_set

    dataset = find_set(data)
    if dataset is None:
        return
    splits = read_splits(dataset)
    where = {k: s for s in SPLITS for k in splits[s]}
    missing: set[int] = set()
    for what, split, scenarios in uses:
        for k in scenarios:
            actual = where.get(int(k))
            if actual is None and str(int(k)) not in splits["flagged"]:
                actual = split_of(int(k))  # not made yet: its split by number
                if what not in unplayed and actual == split:
                    missing.add(int(k))  # named after every misused week, with the command that makes them
            if actual != split:
                why = f"a {actual} week" if actual else f"left out of the splits ({splits['flagged'][str(int(k))]})"
                raise ValueError(f"{what}: week {k} of {data} is not a {split} week: it is {why}")
    if missing:
        raise ValueError(f"week(s) {', '.join(map(str, sorted(missing)))} of {data} are not in the set: "
                         f"{make_weeks_command(dataset, missing)}")


def make_weeks_command(dataset: GeneratedSet, weeks: Collection[int]) -> str:
    """The commands that generate exactly ``weeks`` of ``dataset`` (the same weeks a whole run makes) and check them."""
    meta = dataset.meta
    options = " --without-loss" if not meta.get("with_loss", True) else ""
    options += f" --steps {meta['steps']}" if meta.get("steps") else ""
    return (f"make them with `ace-hybrid data generate --env {meta['env']} --weeks {max(weeks) + 1} "
            f"--seed {meta['seed']} --name {dataset.path.name} --root {dataset.path.parent}{options} "
            f"--only {','.join(map(str, sorted(weeks)))} --jobs 2`, then `ace-hybrid data check {dataset.path} "
            f"--jobs 2`")
