"""Peak memory of one LoRA fine-tuning step of the embedded SmolLM2 on long prompts: one pass over the batch against
micro-batches with activation checkpointing (``llm.lora_micro_batch``, ``llm.lora_checkpointing``).

Each setting runs in its own process, so that process's peak resident memory (ru_maxrss) is the step's:

    PYTHONPATH=python python benchmarks/bench_lora_memory.py --tokens 900 --pairs 8
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one_step(tokens: int, pairs: int, micro: int, checkpointing: bool) -> dict:
    import torch

    torch.set_num_threads(1)
    from ace_hybrid.llm import LLMConfig, make_backend

    backend = make_backend(LLMConfig(backend="smollm2", lora_micro_batch=micro, lora_checkpointing=checkpointing))
    text = " ".join(f"line {k} at {k % 100}% loading;" for k in range(max(1, tokens // 11)))  # ~11 tokens each
    prompt = [{"role": "user", "content": text}]
    n = len(backend.render(prompt))
    t0 = time.perf_counter()
    backend.finetune([(prompt, "substation 3: line 4 to bus 2")] * pairs, epochs=1, batch_size=pairs)
    return {"prompt_tokens": n, "seconds": time.perf_counter() - t0,
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=900, help="approximate prompt length in tokens (default 900)")
    p.add_argument("--pairs", type=int, default=8, help="pairs in the step (default 8, llm.lora_batch_size)")
    p.add_argument("--child", nargs=2, metavar=("MICRO", "CHECKPOINTING"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tokens < 10 or args.pairs < 1:
        p.error(f"--tokens = {args.tokens} must be >= 10 and --pairs = {args.pairs} >= 1")
    if args.child:
        print(json.dumps(one_step(args.tokens, args.pairs, int(args.child[0]), args.child[1] == "1")))
        return 0
    print("| setting | prompt tokens | peak resident memory | step |\n|---|---|---|---|")
    for label, micro, ckpt in (("one pass, no checkpointing", args.pairs, "0"),
                               ("micro-batch 1 + checkpointing (default)", 1, "1")):
        out = subprocess.run([sys.executable, __file__, "--tokens", str(args.tokens), "--pairs", str(args.pairs),
                              "--child", str(micro), ckpt], capture_output=True, text=True)
        if out.returncode:
            print(f"| {label} | - | failed (exit {out.returncode}: killed for memory?) | - |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {label} | {r['prompt_tokens']} | {r['peak_gb']:.1f} GB | {r['seconds']:.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
