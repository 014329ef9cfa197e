"""Placement (Paddle issue 11771): one program whose ops and variables carry PlaceGroups;
each rank runs its ops, and the transfers follow from where variables live.  See
docs/placement.md."""
from . import transfer_ops  # noqa: F401  (registers the transfer op kinds)
from .cluster import Cluster, as_place_group, format_place_group, parse_place_group
from .place_pass import (HandPlacement, ParameterServerStrategy, PlacementStrategy,
                         explain_placement, place, place_guard)
from .runtime import PlacedRun, default_cluster, run_placed, set_cluster
from .transfers import PlacedProgram, Transfer, plan_transfers

__all__ = ["Cluster", "HandPlacement", "ParameterServerStrategy", "PlacedProgram",
           "PlacedRun", "PlacementStrategy", "Transfer", "as_place_group",
           "default_cluster", "explain_placement", "format_place_group",
           "parse_place_group", "place", "place_guard", "plan_transfers", "run_placed",
           "set_cluster"]
