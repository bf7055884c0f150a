"""Can co-evolution teach the embedded model? A learning curve of LoRA fine-tuning on pairs that carry content.

Run:  PYTHONPATH=python python benchmarks/bench_coevolution.py --setting reading --split held-out
          [--pairs 0,100,300,1000] [--rank 16] [--lr 5e-4] [--epochs 1] [--orders 2] [--eval-orders 2]
          [--backend smollm2] [--out runs/coevolution] [--output benchmarks/RESULTS.md]

The simulator labels as many problems as wanted offline: every bad transition with its validated candidates has a
known best (:mod:`actor_problems`). The set (``benchmarks/data/coevolution_problems.json.gz``, built with
``--build``) holds bad transitions of two grids, split by episode: held-out (episode seeds ending in 0 or 1), dev
(ending in 2; for choosing rank, epochs and learning rate) and training (the rest); no episode is in two splits.

One LoRA training runs over the training problems in a fixed shuffled order and is evaluated after the first 0,
100, 300, 1,000, ... of them (each chunk trained ``--epochs`` passes, the adapter carried on, as co-evolution's
rounds do). A problem becomes ``--orders`` pairs (:func:`ace_hybrid.llm.coevolution.content_pairs`): its best
candidate's letter spread evenly over the positions, so only content can be learnt. The evaluation is the model's
position-controlled first choice on the evaluation split (each problem under ``--eval-orders`` seeded shuffled
orders, the same at every point): the share the simulator accepts, beside the controls that read only positions
(the best of them is what the model must beat, paired, with a 95% bootstrap interval over problems) and the
positions it chose. ``--setting reading`` shows each candidate's simulated one-step effect; ``knowledge`` shows only
the state and the candidates' texts.

Everything is kept in ``--out``/<name>: ``curve.json`` (each point's per-problem results, appended as it is
measured) and the adapter after each point; run the same command again to resume after an interruption.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import actor_problems as ap  # noqa: E402
from ace_hybrid.llm.exam import EXAM_SPLITS as SPLITS  # noqa: E402
from ace_hybrid.llm.exam import select as evaluation_problems, split_of  # noqa: E402
from compare_peers import markdown_table, update_markdown  # noqa: E402

DEFAULT_PROBLEMS = ap.ROOT / "benchmarks" / "data" / "coevolution_problems.json.gz"
FIRST_EPISODE = 10_000
"""Episodes of this set start here: none is an episode of benchmarks/data/actor_problems.json."""


def training_stream(problems: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The training split's problems that have a best candidate, in a fixed shuffled order (grids interleaved)."""
    train = [p for p in problems if split_of(p) == "train" and ap.best_candidate(p) is not None]
    return [train[i] for i in np.random.default_rng(seed).permutation(len(train))]


RANKER = {"letter": "llm", "judge": "judge"}
"""The actor's ranker that asks the model each format's question."""


def training_pairs(problems: list[dict[str, Any]], fmt: str, orders: int, show: bool, seed: int
                   ) -> list[tuple[Any, str]]:
    """The pairs of a chunk of training problems: the best candidate's letter under ``orders`` orders, or the
    simulator's verdicts on the best candidate (GOOD) and on one other it did not accept (BAD), balanced."""
    from ace_hybrid.llm.coevolution import content_pairs, judge_pairs

    if fmt == "letter":
        return content_pairs([(ap.choice_problem(p, show), ap.best_candidate(p)) for p in problems], orders, seed)
    rng = np.random.default_rng(seed)
    examples = []
    for p in problems:
        bad = [k for k, ok in enumerate(p["good"]) if not ok]
        verdicts = [(ap.best_candidate(p), True)] + ([(int(rng.choice(bad)), False)] if bad else [])
        examples.append((ap.choice_problem(p, show), verdicts))
    return judge_pairs(examples, seed)


def evaluate(backend: Any, problems: list[dict[str, Any]], orders: int, show_effects: bool, fmt: str
             ) -> dict[str, Any]:
    """The model's position-controlled first choices on ``problems`` (per problem: the chosen candidates and
    positions under each order) and the seconds it took."""
    from ace_hybrid.llm.rankers import Ranker

    started = time.perf_counter()
    chosen, position = ap.first_choices(Ranker(RANKER[fmt], backend), problems, orders, show_effects=show_effects,
                                        desc="evaluate")
    return {"chosen": chosen.tolist(), "position": position.tolist(), "seconds": time.perf_counter() - started}


def prompt_tokens(backend: Any, problems: list[dict[str, Any]], show_effects: bool, fmt: str) -> float:
    """Mean prompt length in tokens (what a fine-tuning step and a call cost grows with; a judged problem asks one
    prompt per candidate)."""
    problems = [ap.choice_problem(p, show_effects) for p in problems[:50]]
    prompts = [p.prompt() for p in problems] if fmt == "letter" else [p.judge_prompt(0) for p in problems]
    return float(np.mean([len(backend.render(q)) for q in prompts]))


def problem_key(problem: dict[str, Any]) -> tuple[str, int, int, int]:
    """What names a problem in curve.json: its grid, scenario, episode seed and step."""
    return problem["env"], problem["scenario"], problem["seed"], len(problem["prefix"])


def extend_points(curve: dict[str, Any], evaluation: list[dict[str, Any]], backend: Any, out: Path,
                  args: argparse.Namespace) -> None:
    """Bring the points a curve measured on another evaluation list onto ``evaluation``: each point keeps the
    answers it has for the problems still evaluated, and its own model (the untrained one for 0, else its saved
    adapter) answers the problems it lacks. Leaves ``backend`` untrained or with the last point's adapter."""
    keys = [problem_key(p) for p in evaluation]
    old = [tuple(k) for k in curve.get("evaluation", keys)]
    curve["evaluation"] = keys
    if old == keys:
        return
    missing = [p for p, k in zip(evaluation, keys) if k not in set(old)]
    for point in curve["points"]:
        answers = dict(zip(old, zip(point["chosen"], point["position"])))
        if missing:
            if point["pairs"] > 0:
                backend.load_adapter(out / f"adapter-{point['pairs']}")
            extra = evaluate(backend, missing, args.eval_orders, args.setting == "reading", args.format)
            answers.update(zip(map(problem_key, missing), zip(extra["chosen"], extra["position"])))
            point["seconds"] += extra["seconds"]
        point["chosen"] = [answers[k][0] for k in keys]
        point["position"] = [answers[k][1] for k in keys]
        print(f"{point['pairs']} problems, now on {len(keys)} evaluation problems ({len(missing)} added): first "
              f"choice accepted {np.mean(ap.good_rate(evaluation, np.array(point['chosen']))):.3f}", flush=True)


def run_curve(args: argparse.Namespace, problems: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Train and evaluate point by point, resuming from ``out``/curve.json; returns the curve."""
    show = args.setting == "reading"
    stream = training_stream(problems, args.seed)
    evaluation = evaluation_problems(problems, args.split, args.eval_limit)
    points = [int(x) for x in args.pairs.split(",")]
    if points != sorted(set(points)) or points[0] < 0 or points[-1] > len(stream):
        raise SystemExit(f"--pairs {args.pairs}: increasing counts in [0, {len(stream)}] (training problems)")
    path = out / "curve.json"
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    curve = json.loads(path.read_text()) if path.is_file() else {"config": config | {"out": str(out)}, "points": []}
    done = [p["pairs"] for p in curve["points"]]
    if done != points[: len(done)]:
        raise SystemExit(f"{path} holds points {done}, not a start of --pairs {points}: use another --out")
    backend = make_backend(args)
    extend_points(curve, evaluation, backend, out, args)
    path.write_text(json.dumps(curve))
    if done and done[-1] > 0:
        backend.load_adapter(out / f"adapter-{done[-1]}")
    curve["prompt_tokens"] = prompt_tokens(backend, evaluation, show, args.format)
    previous = done[-1] if done else 0
    model = args.backend.replace("/", "_").replace(":", "_")
    base = out.parent / (f"base-{model}-{args.format}-{args.setting}-{args.split}-{len(evaluation)}x"
                         f"{args.eval_orders}.json")
    for n in points[len(done):]:
        entry: dict[str, Any] = {"pairs": n, "finetune_seconds": 0.0, "steps": 0, "losses": []}
        cached = json.loads(base.read_text()) if n == 0 and base.is_file() else {}
        if [tuple(k) for k in cached.pop("evaluation", [])] == curve["evaluation"]:
            entry.update(cached)  # the untrained model's answers: the same for every configuration
        elif n > previous:
            pairs = training_pairs(stream[previous:n], args.format, args.orders, show, args.seed + n)
            stats = backend.finetune(pairs, rank=args.rank, alpha=2.0 * args.rank, lr=args.lr, epochs=args.epochs,
                                     batch_size=args.batch_size)
            backend.save_adapter(out / f"adapter-{n}")
            entry.update(finetune_seconds=stats.seconds, steps=stats.steps, losses=list(stats.losses))
        if "chosen" not in entry:
            entry.update(evaluate(backend, evaluation, args.eval_orders, show, args.format))
            if n == 0:
                base.write_text(json.dumps({k: entry[k] for k in ("chosen", "position", "seconds")}
                                           | {"evaluation": curve["evaluation"]}))
        curve["points"].append(entry)
        path.write_text(json.dumps(curve))
        print(f"{n} problems: first choice accepted {np.mean(ap.good_rate(evaluation, np.array(entry['chosen']))):.3f}"
              f" ({entry['finetune_seconds']:.0f} s fine-tuning, {entry['seconds']:.0f} s evaluation)", flush=True)
        previous = n
    return curve


def make_backend(args: argparse.Namespace) -> Any:
    """The model to fine-tune: micro-batches of whole steps without activation checkpointing (the prompts are
    short), LoRA on ``--lora-modules``."""
    from ace_hybrid.config import LLMConfig
    from ace_hybrid.llm import make_backend as build

    modules = tuple(m for m in args.lora_modules.split(",") if m)
    kind, _, path = args.backend.partition(":")
    cfg = LLMConfig(backend=kind, model_path=path or None, lora_micro_batch=args.batch_size,
                    lora_checkpointing=False, lora_target_modules=modules, seed=args.seed)
    return build(cfg)


def report(curve: dict[str, Any], problems: list[dict[str, Any]]) -> str:
    """The curve as a table: each point's first-choice rate (overall and per grid), its paired differences to the
    best position-only control and to the simulation ranker, the most chosen position and the fine-tuning time."""
    from ace_hybrid.llm.rankers import Ranker

    keys = {problem_key(p): p for p in problems}
    evaluation = [keys[tuple(k)] for k in curve["evaluation"]]
    envs = sorted({p["env"] for p in evaluation})
    masks = [np.array([p["env"] == e for p in evaluation]) for e in envs]

    def per_grid(rate: np.ndarray) -> str:
        return " / ".join(f"{100 * rate[m].mean():.1f}%" for m in masks)

    controls = ap.position_controls(evaluation)
    best_name = max(controls, key=lambda k: controls[k].mean())
    sim_chosen, _ = ap.first_choices(Ranker("sim"), evaluation, 1, desc="sim")
    sim = ap.good_rate(evaluation, sim_chosen)
    rows = [[f"control: {name}", ap.ci(v), per_grid(v), "", "", "", "", ""] for name, v in controls.items()]
    rows.append(["reference: simulation ranker (lowest simulated loading)", ap.ci(sim), per_grid(sim), "", "", "", "",
                 ""])
    n = max(len(p["good"]) for p in evaluation)
    total = 0.0
    for point in curve["points"]:
        rate = ap.good_rate(evaluation, np.array(point["chosen"]))
        top, _ = ap.spread(np.array(point["position"]), n)
        total += point["finetune_seconds"]
        gain = rate - controls[best_name]
        rows.append([f"LLM after {point['pairs']:,} training problems", ap.ci(rate), per_grid(rate),
                     ap.diff_ci(gain), " / ".join(ap.diff_ci(gain[m]) for m in masks), ap.diff_ci(rate - sim),
                     f"{100 * top:.0f}%", f"{total / 60:.0f} min"])
    return markdown_table(["first choice on the evaluation split", "accepted by the simulator",
                           f"per grid ({' / '.join(envs)})", f"− best position-only control ({best_name}), paired",
                           "the same, per grid", "− simulation ranker, paired", "most chosen position",
                           "fine-tuning so far"], rows)


def plot(curves: dict[str, dict[str, Any]], problems: list[dict[str, Any]], path: Path) -> None:
    """First-choice rate against training problems, a 95% band per setting, the best position-only control."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ace_hybrid.llm.rankers import Ranker

    keys = {problem_key(p): p for p in problems}
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, curve in curves.items():
        evaluation = [keys[tuple(k)] for k in curve["evaluation"]]
        xs = [max(pt["pairs"], 10) for pt in curve["points"]]
        stats = [ap.bootstrap(ap.good_rate(evaluation, np.array(pt["chosen"]))) for pt in curve["points"]]
        ax.plot(xs, [100 * s[0] for s in stats], marker="o", label=f"SmolLM2, {label}")
        ax.fill_between(xs, [100 * s[1] for s in stats], [100 * s[2] for s in stats], alpha=0.2)
        controls = ap.position_controls(evaluation)
        best = max(controls.values(), key=lambda v: v.mean())
        ax.axhline(100 * best.mean(), color="grey", linestyle="--", linewidth=1)
        sim, _ = ap.first_choices(Ranker("sim"), evaluation, 1, desc="sim")
        ax.axhline(100 * ap.good_rate(evaluation, sim).mean(), color="black", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("training problems (log scale; 0 drawn at 10)")
    ax.set_ylabel("first choice accepted by the simulator (%)")
    ax.set_title("LoRA fine-tuning on content pairs\n(dashed: best position-only control; dotted: simulation ranker)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="smollm2", help="smollm2 | transformers:PATH (a server cannot be tuned)")
    p.add_argument("--problems", type=Path, default=DEFAULT_PROBLEMS)
    p.add_argument("--build", action="store_true", help="build the problem set (--per-env per grid)")
    p.add_argument("--per-env", type=int, default=1200)
    p.add_argument("--envs", default=",".join(ap.ENVS))
    p.add_argument("--setting", choices=("reading", "knowledge"), default="reading")
    p.add_argument("--format", choices=("letter", "judge"), default="judge",
                   help="what the model is asked and taught: the right candidate's letter, or a verdict per candidate")
    p.add_argument("--split", choices=("dev", "held-out"), default="dev", help="what the curve is evaluated on")
    p.add_argument("--eval-limit", type=int, default=0, help="evaluate on N problems of the split, every k-th (0: all)")
    p.add_argument("--pairs", default="0,100,300,1000", help="training problems seen at each point")
    p.add_argument("--orders", type=int, default=2, help="pairs per training problem (letters spread evenly)")
    p.add_argument("--eval-orders", type=int, default=2, help="shuffled orders per evaluation problem")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lora-modules", default="", help="comma-separated (default: peft's for the model)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/coevolution"), help="parent of this curve's folder")
    p.add_argument("--name", default="", help="this curve's folder (default: from the settings)")
    p.add_argument("--plot", default="", help="comma-separated curve folders to draw into --figure, then exit")
    p.add_argument("--figure", type=Path, default=Path("docs/figures/coevolution_curve.png"))
    p.add_argument("--output", type=Path, help="markdown file whose 'coevolution' section to write")
    args = p.parse_args(argv)
    if args.backend.startswith("openai"):
        p.error("--backend openai: a server cannot be fine-tuned here")
    import torch

    torch.set_num_threads(args.threads)
    envs = tuple(e.strip() for e in args.envs.split(",") if e.strip())
    if args.build:
        problems = ap.build_set(args.problems, args.per_env, args.seed + 11, envs, FIRST_EPISODE)
    else:
        problems = ap.load_problems(args.problems, args.per_env, args.seed + 11, False, envs)
    if args.plot:
        folders = [Path(x) for x in args.plot.split(",")]
        curves = [json.loads((f / "curve.json").read_text()) for f in folders]
        plot({f"{c['config'].get('format', 'letter')}, {c['config']['setting']}": c for c in curves}, problems,
             args.figure)
        print(f"wrote {args.figure}")
        return 0
    name = args.name or (f"{args.format}-{args.setting}-{args.split}-r{args.rank}-lr{args.lr:g}-e{args.epochs}"
                         f"-o{args.orders}"
                         f"{'-' + args.lora_modules.replace(',', '+') if args.lora_modules else ''}")
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    curve = run_curve(args, problems, out)
    counts = {s: sum(split_of(q) == s for q in problems) for s in SPLITS}
    cmd = "PYTHONPATH=python python benchmarks/bench_coevolution.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        f"### Co-evolution's learning curve ({args.format}, {args.setting}, evaluated on the {args.split} split)", "",
        f"Command: `{cmd.strip()}` (torch threads {args.threads})", "",
        f"{len(problems)} labelled bad transitions of {', '.join(envs)} (train {counts['train']}, dev {counts['dev']}, "
        f"held-out {counts['held-out']}; whole episodes per split), 8 candidates each; evaluation on "
        f"{len(curve['evaluation'])} problems x {args.eval_orders} shuffled orders; LoRA rank {args.rank}, lr "
        f"{args.lr:g}, {args.epochs} epoch(s) per chunk, batch {args.batch_size}; "
        + (f"{args.orders} letter pairs per training problem; prompts of {curve['prompt_tokens']:.0f} tokens"
           if args.format == "letter" else
           f"a GOOD and a BAD verdict per training problem, balanced; one prompt of {curve['prompt_tokens']:.0f} "
           "tokens per candidate") + " on average. Intervals: 95% bootstrap over problems.", "",
        report(curve, problems), ""])
    print(text)
    (out / "report.md").write_text(text)
    if args.output:
        update_markdown(args.output, f"coevolution-{args.format}-{args.setting}-{args.split}", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
