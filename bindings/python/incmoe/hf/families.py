"""The Hugging Face MoE families incmoe.hf knows, and where their experts are.

Each family's decoder layers hold a sparse MoE block whose forward is

    _, top_k_weights, top_k_index = block.gate(hidden)      # the router
    y = block.experts(hidden, top_k_index, top_k_weights)   # fused experts
    (Qwen2-MoE adds sigmoid(block.shared_expert_gate(hidden)) * block.shared_expert(hidden))

with the experts fused as gate_up_proj [E, 2I, H] (the gate projection's I
rows first) and down_proj [E, H, I], SiLU-gated (transformers 5.x).  Only
block.experts is replaced: the router (so output_router_logits keeps working),
the shared expert and the dense layers (mlp_only_layers, decoder_sparse_step)
stay as they are.  These names can move between transformers releases, so
find_blocks checks each one it relies on and names what it did not find.
"""

import dataclasses
import importlib

import torch


@dataclasses.dataclass(frozen=True)
class Family:
    model_type: str  # config.model_type
    module: str  # transformers.models.<module>.modeling_<module>
    block: str  # the sparse MoE block's class in that module
    routing: str  # what the router computes, for messages and the benchmark's output


FAMILIES = {
    f.model_type: f
    for f in (
        Family("olmoe", "olmoe", "OlmoeSparseMoeBlock",
               "softmax over all experts in fp32, top-k, not renormalised"),
        Family("mixtral", "mixtral", "MixtralSparseMoeBlock",
               "softmax in fp32, top-k, renormalised"),
        Family("qwen2_moe", "qwen2_moe", "Qwen2MoeSparseMoeBlock",
               "softmax in fp32, top-k, renormalised if norm_topk_prob; "
               "a shared expert with its own sigmoid gate"),
        Family("qwen3_moe", "qwen3_moe", "Qwen3MoeSparseMoeBlock",
               "softmax in fp32, top-k, renormalised if norm_topk_prob"),
    )
}


@dataclasses.dataclass
class Blocks:
    """A model's sparse MoE blocks, in the order its forward calls them."""

    family: Family
    names: list  # module paths, e.g. "model.layers.3.mlp"
    blocks: list
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    dtype: torch.dtype

    def summary(self):
        """What every rank must agree on, as a dict of plain values."""
        return {
            "family": self.family.model_type,
            "sparse_blocks": self.names,
            "num_experts": self.num_experts,
            "top_k": self.top_k,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "dtype": str(self.dtype),
        }


def _transformers_version():
    try:
        import transformers

        return transformers.__version__
    except ImportError:
        return None


def family_of(model):
    """The Family of a transformers model; ValueError naming the model type if unknown."""
    config = getattr(model, "config", None)
    mt = getattr(config, "model_type", None)
    if mt not in FAMILIES:
        raise ValueError(
            "incmoe.hf: model type %r (%s) is not a family incmoe.hf knows (%s)"
            % (mt, type(model).__name__, ", ".join(sorted(FAMILIES)))
        )
    return FAMILIES[mt]


def _block_class(fam):
    modname = "transformers.models.%s.modeling_%s" % (fam.module, fam.module)
    try:
        mod = importlib.import_module(modname)
    except ImportError as e:
        raise ValueError("incmoe.hf: cannot import %s (%s)" % (modname, e)) from None
    cls = getattr(mod, fam.block, None)
    if cls is None:
        raise ValueError(
            "incmoe.hf: transformers %s has no %s.%s; incmoe.hf was tested with the "
            "releases its [hf] extra names" % (_transformers_version(), modname, fam.block)
        )
    return cls


def _shape_of(fam, name, block):
    """(E, k, H, I, dtype) of one block, checking each name and shape relied on."""
    exp = getattr(block, "experts", None)
    gate = getattr(block, "gate", None)
    what = "%s (%s)" % (name, fam.block)
    for attr in ("gate_up_proj", "down_proj"):
        if not isinstance(getattr(exp, attr, None), torch.Tensor):
            raise ValueError(
                "incmoe.hf: %s has no experts.%s tensor: not transformers 5.x's fused experts "
                "(transformers %s)" % (what, attr, _transformers_version())
            )
    k = getattr(gate, "top_k", None)
    if not isinstance(k, int):
        raise ValueError("incmoe.hf: %s has no router gate.top_k (transformers %s)"
                         % (what, _transformers_version()))
    gu, dn = exp.gate_up_proj, exp.down_proj
    if gu.dim() != 3 or dn.dim() != 3 or gu.shape[1] % 2 or tuple(dn.shape) != (
        gu.shape[0], gu.shape[2], gu.shape[1] // 2
    ):
        raise ValueError(
            "incmoe.hf: %s: gate_up_proj %s and down_proj %s are not [E, 2I, H] and [E, H, I]"
            % (what, tuple(gu.shape), tuple(dn.shape))
        )
    if gu.device.type != "cpu" or dn.device.type != "cpu":
        raise ValueError(
            "incmoe.hf: %s's experts are on %s: incmoe.MoE runs the CPU backend; load the model "
            "on the CPU" % (what, gu.device)
        )
    if gu.dtype != dn.dtype:
        raise ValueError("incmoe.hf: %s: gate_up_proj is %s but down_proj %s" % (what, gu.dtype, dn.dtype))
    return gu.shape[0], k, gu.shape[2], gu.shape[1] // 2, gu.dtype


def find_blocks(model, is_replaced):
    """The model's sparse MoE blocks.  is_replaced(experts) tells an experts
    module incmoe.hf put there (a model sharded already is refused)."""
    fam = family_of(model)
    act = getattr(model.config, "hidden_act", None)
    if act != "silu":
        raise ValueError(
            "incmoe.hf: hidden_act is %r: incmoe.MoE computes SiLU-gated experts only" % (act,)
        )
    cls = _block_class(fam)
    names, blocks = [], []
    for name, mod in model.named_modules():
        if isinstance(mod, cls):
            if is_replaced(getattr(mod, "experts", None)):
                raise ValueError(
                    "incmoe.hf: %s is sharded already (its experts run on incmoe)" % name
                )
            names.append(name)
            blocks.append(mod)
    if not blocks:
        raise ValueError("incmoe.hf: %s has no %s: no sparse MoE block to shard"
                         % (type(model).__name__, fam.block))
    shapes = {_shape_of(fam, n, b) for n, b in zip(names, blocks)}
    if len(shapes) != 1:
        raise ValueError("incmoe.hf: the sparse MoE blocks differ in (E, k, H, I, dtype): %s"
                         % sorted(shapes, key=str))
    E, k, H, I, dtype = shapes.pop()
    return Blocks(fam, names, blocks, E, k, H, I, dtype)
