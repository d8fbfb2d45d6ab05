"""Published figures the model's predictions are set beside (quoted, with their source and
their setting; not model output).

DeepEP's low-latency kernels: github.com/deepseek-ai/DeepEP, docs/legacy.md (the V1
README's "Low-latency kernels with pure RDMA" table; the README of today points there for
V1's performance): H800 GPUs, each with a ConnectX-7 InfiniBand NIC at 400 Gbit/s (about
50 GB/s), DeepSeek-V3/R1's decode setting: 128 tokens per batch, hidden 7168, top-8 experts,
FP8 dispatch and BF16 combine.  Latency in microseconds, dispatch and combine each alone."""


DEEPEP_SOURCE = "github.com/deepseek-ai/DeepEP, docs/legacy.md (V1 low-latency kernels)"

DEEPEP_NIC = "400gbit"

# EP size: (dispatch us, combine us).
DEEPEP_LL_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369),
                256: (194, 360)}

# DeepEP's setting: the model is DeepSeek-V3's (E=256, k=8, H=7168), 128 tokens per rank;
# an FP8 row is 7168 bytes and, as DeepSeek-V3 scales FP8 per 128 elements, 56 fp32 scales
# (the bytes of the scales are our reading of its format, not a published figure); a BF16
# row is 2 x 7168 bytes.
DEEPEP_SETTING = {"model": "deepseek-v3", "tokens": 128, "hidden": 7168,
                  "dispatch_row": 7168 + 7168 // 128 * 4, "combine_row": 2 * 7168}
