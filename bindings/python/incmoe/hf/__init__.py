"""incmoe.hf: Hugging Face transformers MoE models, expert-parallel on incmoe.

    import incmoe, incmoe.hf, transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(path)   # every rank
    comm = incmoe.Communicator(switch, job, rank, nranks)             # or an "incmoe" group
    incmoe.hf.expert_parallel(model, comm)                            # collective
    out = model.generate(my_prompts, max_new_tokens=16)               # each rank its own prompts

Attention and everything outside the sparse MoE blocks run data-parallel
(each rank its own prompts, the whole weights); each sparse block's experts
are sharded over the ranks and run on incmoe.MoE.  Families: OLMoE, Mixtral,
Qwen2-MoE, Qwen3-MoE (transformers 5.x: the versions the [hf] extra names).
Inference only.

    expert_parallel(model, comm, routing, mode, max_tokens, timeout_ms, algo, placement,
                    keep_weights)
                           shard, in place; each layer's path measured (auto) unless forced;
                           placement: experts on several ranks (replicas)
    finish(model)          a rank with no forward left serves the others' until all are done
    rebalance(model, sample, extra_slots)
                           between batches: a placement with replicas chosen from the routing
                           the layers saw, the layers built again with it (keep_weights=True)
    recover(model)         after a lost rank: shrink the communicator, each expert on its live
                           replicas; returns the new Communicator; re-run the interrupted prompts
    FAMILIES               the model types known, and what each one's router does
    models                 the four families' configs built in code, seeded models
"""

from . import models
from .families import FAMILIES
from .elastic import rebalance, recover
from .shard import MODES, ROUTINGS, expert_parallel, finish

__all__ = ["FAMILIES", "MODES", "ROUTINGS", "expert_parallel", "finish", "models", "rebalance",
           "recover"]
