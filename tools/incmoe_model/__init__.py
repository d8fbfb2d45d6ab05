"""incmoe_model - the cost model of incmoe's collectives and its MoE layer, standard
library only.  tools/incmoe-model is its command line (its --help has the model, from
cli.py); the names below are the model as a library (tests/model uses them).

The modules, each importing only those before it: presets, units, routing, flows, tree,
params, collective, lowlat, layer, switchmem, commands, measured, fit, plot,
published, decode, cli.
"""

from .presets import MODELS, PREDICT_MODELS, PREDICT_N, PRESETS, ModelError
from .routing import (expert_owner, kbar_uniform, route_stats, sample_expert_sets,
                      sampled_stats, uniform_stats)
from .flows import ALGOS, FULL_OPS, MASKED_OPS, Traffic, ring_steps
from .tree import build_tree, edge_load, parse_tree, path_work, tree_components
from .params import Params, add_model_options, add_time_options, params_from, testbed_burst
from .collective import Timing, collective_time, traffic
from .lowlat import LLTiming, ll_time, ll_traffic
from .layer import auto_bands, decode_time, ffn_time, header_time, moe_time
from .switchmem import job_memory, line_rate_credits
from .commands import rows_per_direction
from .measured import PointParser, model_point, parse_point, read_measurements
from .fit import fit_constants
from .published import DEEPEP_LL_US, DEEPEP_SETTING
from .decode import cmd_decode
from .cli import main
