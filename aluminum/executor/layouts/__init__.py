"""Tensor layouts over device meshes and redistribution between any two of them
(MindSpore's auto-parallel layouts; DTensor's placements).  See docs/auto_parallel.md."""
from . import ops  # noqa: F401  (registers redistribute and its gradient)
from .mesh import DeviceMesh, Layout, Partial, Replicate, Shard, split_bounds
from .planner import Redistribution, plan_redistribution
from .run import redistribute, redistribute_backward
from .steps import Step
from .traffic import Traffic, count_traffic

__all__ = ["DeviceMesh", "Layout", "Partial", "Redistribution", "Replicate", "Shard", "Step",
           "Traffic", "count_traffic", "plan_redistribution", "redistribute",
           "redistribute_backward", "split_bounds"]
