"""Time per output token of a sharded Hugging Face model (incmoe.bench.prefill's
--generate): greedy decode steps timed by the arrival of each step's logits, at the
prefill's batch and at the decode batches --decode-batches names."""

import time

import torch.distributed as dist


class Stamps:
    """A logits processor that only notes when each decode step's logits came."""

    def __init__(self):
        self.t = []

    def __call__(self, input_ids, scores):
        self.t.append(time.perf_counter())
        return scores


def generate_tpot(model, x, steps):
    """Seconds per output token over `steps` greedy decode steps after x's prefill (EOS
    off); every rank starts together."""
    from transformers import LogitsProcessorList

    stamps = Stamps()
    dist.barrier()
    model.generate(x, max_new_tokens=steps + 1, do_sample=False, eos_token_id=None,
                   pad_token_id=0, logits_processor=LogitsProcessorList([stamps]))
    return (stamps.t[-1] - stamps.t[0]) / steps


def decode_batches(model, prompts, args, paths):
    """{B: {"tpot": seconds per output token, "paths": the layers' paths after it}} for each
    B of args.decode_batches: B prompts of args.length tokens per rank (prompts(B)), one
    untimed generate of two tokens first when args.warmup > 0, so that the layers' own
    choice for a decode step of B tokens (incmoe.hf's auto: its decode path when the layer
    has one) is made before the clock runs, then args.generate timed steps."""
    out = {}
    for B in args.decode_batches:
        x = prompts(B)
        if args.warmup > 0:
            generate_tpot(model, x, 1)
        tpot = generate_tpot(model, x, args.generate)
        out[B] = {"tpot": tpot, "paths": paths(model)}
    return out
