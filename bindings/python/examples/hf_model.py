#!/usr/bin/env python3
"""A Hugging Face MoE model, expert-parallel over 4 ranks with incmoe.hf,
generating the same tokens as the model in one process.

    python3 bindings/python/examples/hf_model.py [--model olmoe|mixtral|qwen2_moe|qwen3_moe]
                                                 [--checkpoint DIR] [--mode pipelined|baseline]

Every rank loads the same model (a small seeded one built from a config in
code, or --checkpoint: a local directory from save_pretrained, loaded with
from_pretrained), keeps a quarter of each sparse block's experts and
generates 16 greedy tokens from its own prompts; the parent generates from
every rank's prompts with the whole model and compares.  Starts its own
switch unless INCMOE_SWITCH=host:port names one.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import transformers  # noqa: E402

import incmoe  # noqa: E402
import incmoe.hf  # noqa: E402
from incmoe.hf import models  # noqa: E402
from incmoe.hf.experts import IncmoeExperts  # noqa: E402
from ranks import run_ranks  # noqa: E402

N, BATCH, LENGTH, NEW = 4, 2, 8, 16


def load(args):
    if args.checkpoint:
        return transformers.AutoModelForCausalLM.from_pretrained(
            args.checkpoint, dtype=torch.float32, local_files_only=True).eval()
    return models.build(models.config(args.model, "tiny"), seed=0)


def generate(model, prompts):
    with torch.no_grad():
        return model.generate(prompts, max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                              pad_token_id=0)


def rank_main(rank, switch, job, args, prompts, results):
    torch.set_num_threads(1)
    model = load(args)
    with incmoe.Communicator(switch, job, rank, N) as comm:
        incmoe.hf.expert_parallel(model, comm, mode=args.mode)
        if rank == 0:
            blocks = [m for m in model.modules() if isinstance(m, IncmoeExperts)]
            print("rank 0 runs %d sparse blocks on incmoe.MoE: %s" % (len(blocks), blocks[0].layer.extra_repr()),
                  flush=True)
        out = generate(model, prompts)
    results.put((rank, out.numpy()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="olmoe", choices=models.NAMES)
    ap.add_argument("--checkpoint", help="a local directory written by save_pretrained")
    ap.add_argument("--mode", default="pipelined", choices=["pipelined", "baseline"])
    args = ap.parse_args()
    model = load(args)
    prompts = [models.prompts(model.config, BATCH, LENGTH, seed=r) for r in range(N)]
    want = [generate(model, p) for p in prompts]  # the whole model, one process

    got = run_ranks(N, rank_main, [(args, prompts[r]) for r in range(N)], timeout_s=300)
    ok = len(got) == N
    for r in sorted(got):
        same = torch.equal(got[r], want[r])
        ok &= same
        print("rank %d: %s -> %s %s" % (r, prompts[r][0].tolist(), got[r][0, LENGTH:].tolist(),
                                        "same as one process" if same else "DIFFERS"))
    print("hf example (%s, %s): %s" % (model.config.model_type, args.mode, "ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
