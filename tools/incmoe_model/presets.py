"""The models, the presets (every constant of the model, with its unit in the name) and
ModelError, what bad input raises."""


PROG = "incmoe-model"


# Models: experts, experts per token, hidden size, expert intermediate size.
MODELS = {
    "mixtral": {"name": "Mixtral-8x7B", "E": 8, "k": 2, "H": 4096, "I": 14336},
    "olmoe": {"name": "OLMoE-1B-7B", "E": 64, "k": 8, "H": 2048, "I": 1024},
    "qwen3-30b-a3b": {"name": "Qwen3-30B-A3B", "E": 128, "k": 8, "H": 2048, "I": 768},
    "deepseek-v3": {"name": "DeepSeek-V3", "E": 256, "k": 8, "H": 7168, "I": 2048},
}


PREDICT_MODELS = ["olmoe", "qwen3-30b-a3b", "deepseek-v3"]


PREDICT_N = [8, 16, 32, 64, 128, 256]


MAX_RANKS = 256  # INCMOE_MAX_RANKS


# Every constant of the model, with its unit in the name.  testbed: fitted by
# `fit` from bench/data/targets (BENCHMARKS.md gives the command); fabric: the
# paper's 100 Gbit/s per rank with RDMA-like per-message costs and a switch
# that forwards and reduces at line rate.
PRESETS = {
    "testbed": {
        "rate": "100mbit",
        "latency_us": 83.34,
        "msg_cost_us": 5.436,  # as the switch's: the same kind of process on the same stack
        "switch_msg_cost_us": 5.436,
        "switch_byte_cost_ns": 1.25,
        "efficiency": 0.9853,
        "burst": None,  # tools/testbed's: max(1 ms at the rate, 4 frames of MTU 9000)
        "chunk": 131072,
        "credits": 64,
        "ffn_gflops": 52.55,  # per core
        "cores": 2,  # the ranks share them
        "band_cost_us": 748.5,
    },
    "fabric": {
        "rate": "100gbit",
        "latency_us": 3.0,
        "msg_cost_us": 0.25,
        "switch_msg_cost_us": 0.0,
        "switch_byte_cost_ns": 0.0,
        "efficiency": 1.0,
        "burst": 0,
        "chunk": 131072,
        "credits": 64,
        "ffn_gflops": 300000.0,  # per rank: an accelerator's dense rate
        "cores": 0,  # 0: every rank has its own
        "band_cost_us": 20.0,
    },
}


class ModelError(Exception):
    """Bad input: the message names what was wrong."""
