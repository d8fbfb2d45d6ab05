"""incmoe: Python/PyTorch bindings over libincmoe (in-network collectives) and
libincmoe_moe (the band-pipelined expert-parallel MoE layer).

    incmoe.Communicator   a rank of a job on incmoe-switchd: all_gather,
                          reduce_scatter, all_reduce, broadcast, barrier,
                          dispatch and combine (routed rows), all_to_all_single
    incmoe.Dispatch       what Communicator.dispatch returns (needs torch)
    incmoe.MoE            torch.nn.Module over libincmoe_moe (needs torch)
    incmoe.Switch         starts an incmoe-switchd on this machine
    incmoe.choose_placement  a placement with replicas for a routing sample's load
    incmoe.placement_rows    the rows each rank receives on a placement
    incmoe.IncmoeError    what a failed C call raises
    incmoe.Status         incmoe_status_t as an IntEnum (IncmoeError.status)

With torch installed, importing incmoe registers the torch.distributed
backend "incmoe" (see incmoe.distributed).
"""

from ._errors import IncmoeError
from ._lib import LibraryNotFound, Status, version
from .communicator import Communicator, Work
from .placement import choose_placement, placement_rows
from .switch import Switch, find_switchd

__all__ = [
    "Communicator",
    "Dispatch",
    "IncmoeError",
    "LibraryNotFound",
    "MoE",
    "Status",
    "Switch",
    "Work",
    "choose_placement",
    "find_switchd",
    "placement_rows",
    "version",
]

try:
    import torch
    import torch.distributed
except ImportError:
    torch = None

if torch is not None:
    from .dispatch import Dispatch
    from .moe import MoE

    if torch.distributed.is_available():
        from . import distributed  # registers the "incmoe" backend
