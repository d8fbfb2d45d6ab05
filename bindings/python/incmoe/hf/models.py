"""The four families' configs, built in code (nothing is downloaded), and
models with seeded random weights.

    config("olmoe", "real")    the published checkpoint's config (allenai/OLMoE-1B-7B-0924)
    config("olmoe", "bench")   the same E, k and block structure, fewer layers, H = 512 and I
                               scaled with it: the prefill benchmark's default on CPUs
    config("olmoe", "tiny")    the same E and k, H = 32: the tests
    build(cfg, seed=0, dtype=torch.float32)   a causal LM with seeded weights

Sizes keep each family's routing (E, k, norm_topk_prob, Qwen2-MoE's shared
expert) and its mix of sparse and dense layers; the tiny Qwen configs add
dense layers (decoder_sparse_step, mlp_only_layers) so that the tests see
both.  The tiny configs initialise with std 0.2 instead of 0.02 so that the
experts' share of each layer's output is large enough for a test to notice
a wrong one.
"""

import torch

NAMES = ("olmoe", "mixtral", "qwen2_moe", "qwen3_moe")
SIZES = ("tiny", "bench", "real")


def _rope(theta):
    return {"rope_parameters": {"rope_theta": float(theta), "rope_type": "default"}}


# The published configs (their config.json), as the keyword arguments of
# transformers' config classes.
_REAL = {
    "olmoe": ("allenai/OLMoE-1B-7B-0924", "OlmoeConfig", dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
        norm_topk_prob=False, max_position_embeddings=4096, rms_norm_eps=1e-5,
        pad_token_id=1, eos_token_id=50279, tie_word_embeddings=False, **_rope(10000))),
    "mixtral": ("mistralai/Mixtral-8x7B-v0.1", "MixtralConfig", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=32768, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, **_rope(1e6))),
    "qwen2_moe": ("Qwen/Qwen1.5-MoE-A2.7B", "Qwen2MoeConfig", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
        num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=8192,
        rms_norm_eps=1e-6, tie_word_embeddings=False, **_rope(1e6))),
    "qwen3_moe": ("Qwen/Qwen3-30B-A3B", "Qwen3MoeConfig", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=False, **_rope(1e6))),
}

# The expert width's name in each family's config.
_MOE_I = {"olmoe": "intermediate_size", "mixtral": "intermediate_size",
          "qwen2_moe": "moe_intermediate_size", "qwen3_moe": "moe_intermediate_size"}


def _scaled(name, hidden, layers, vocab, head_dim, init=None, intermediate=None):
    """The real config with H = hidden and every width scaled by hidden / H_real."""
    kw = dict(_REAL[name][2])
    f = hidden / kw["hidden_size"]
    q_per_kv = kw["num_attention_heads"] // kw["num_key_value_heads"]
    heads = max(q_per_kv, hidden // head_dim)
    kw.update(hidden_size=hidden, num_hidden_layers=layers, vocab_size=vocab,
              num_attention_heads=heads, num_key_value_heads=max(1, heads // q_per_kv),
              max_position_embeddings=4096, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    if "head_dim" in kw:
        kw["head_dim"] = head_dim
    for key in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if key in kw:
            kw[key] = max(8, int(round(kw[key] * f / 8)) * 8)
    if intermediate is not None:
        kw[_MOE_I[name]] = intermediate
    if init is not None:
        kw["initializer_range"] = init
    return kw


def config(name, size="bench", layers=None, hidden=None, intermediate=None):
    """A transformers config of family `name` at `size` ("tiny", "bench",
    "real"); layers overrides the size's layer count, hidden and
    intermediate (the experts' I) the tiny and bench sizes' H and I.  Its
    .incmoe_shape says what it is, for output."""
    import transformers

    if name not in _REAL:
        raise ValueError("model %r: expected one of %s" % (name, ", ".join(NAMES)))
    if size not in SIZES:
        raise ValueError("size %r: expected one of %s" % (size, ", ".join(SIZES)))
    source, cls, real = _REAL[name]
    if size == "real":
        if hidden is not None or intermediate is not None:
            raise ValueError("the real config keeps its H and I; pick size 'bench' to change them")
        kw = dict(real)
        if layers is not None:
            kw["num_hidden_layers"] = layers
    elif size == "bench":
        kw = _scaled(name, hidden or 512, layers or 4, 4096, 64, intermediate=intermediate)
    else:
        kw = _scaled(name, hidden or 32, layers or 2, 96, 8, init=0.2, intermediate=intermediate)
        kw["max_position_embeddings"] = 256
        if name == "qwen2_moe" and layers is None:  # dense layers 0 and 2, sparse 1 and 3
            kw.update(num_hidden_layers=4, decoder_sparse_step=2)
        if name == "qwen3_moe" and layers is None:  # sparse 0 and 2, dense 1
            kw.update(num_hidden_layers=3, mlp_only_layers=[1])
    cfg = getattr(transformers, cls)(**kw)
    cfg.incmoe_shape = _describe(name, size, source, cfg, real)
    return cfg


def _describe(name, size, source, cfg, real):
    E = cfg.num_experts if hasattr(cfg, "num_experts") else cfg.num_local_experts
    i_key = _MOE_I[name]
    text = "%s-%s: %s shape, E=%d k=%d" % (name, size, source, E, cfg.num_experts_per_tok)
    if size == "real":
        return text + ", %d of %d layers, H=%d, I=%d" % (
            cfg.num_hidden_layers, real["num_hidden_layers"], cfg.hidden_size, real[i_key])
    return text + ", %d of %d layers, H=%d of %d, I=%d of %d, vocab %d of %d" % (
        cfg.num_hidden_layers, real["num_hidden_layers"], cfg.hidden_size, real["hidden_size"],
        getattr(cfg, i_key), real[i_key], cfg.vocab_size, real["vocab_size"])


def preload():
    """Import the four families' modeling code now (transformers imports it
    lazily, seconds each): a parent that forks ranks does it once for all."""
    import importlib

    from .families import FAMILIES

    for fam in FAMILIES.values():
        importlib.import_module("transformers.models.%s.modeling_%s" % (fam.module, fam.module))


def build(cfg, seed=0, dtype=torch.float32):
    """A causal LM of cfg with weights drawn from seed (the same on every
    process), in eval mode, converted to dtype after drawing in float32."""
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model.to(dtype).eval()


def prompts(cfg, batch, length, seed):
    """[batch, length] token ids drawn from seed, avoiding the pad id."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, cfg.vocab_size, (batch, length), generator=g)
