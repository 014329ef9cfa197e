"""aluminum's executor layer (PaddlePaddle's ParallelExecutor design on aluminum's API).

Describe a network once as a ``Program`` with ``layers``, add its backward pass and
updates with an optimizer's ``minimize``, run the startup program once, then run the main
program with ``Executor`` (sequential, the reference) or ``ParallelExecutor`` (an SSA graph
run out of order on a thread pool).  See docs/executor.md.
"""
from . import layers
from .backward import append_backward
from .data_parallel import broadcast_parameters, data_parallel_program, shard
from .errors import ExecutionError, ProgramError
from .executor import Executor
from .ir import (Block, Operator, PlaceGroup, Program, Variable, default_main_program,
                 default_startup_program, program_guard, reset_unique_names)
from .join import join
from .layouts import (DeviceMesh, Layout, Partial, Redistribution, Replicate, Shard,
                      count_traffic, plan_redistribution, redistribute, redistribute_backward)
from .optimizer import SGD, Adam, Momentum
from .parallel_context import (GradReducer, ParallelMode, get_parallel_context,
                               reset_parallel_context, set_parallel_context)
from .parallel_executor import (BuildStrategy, ExecutionStrategy, ParallelExecutor,
                                default_threads)
from .placement import (Cluster, HandPlacement, ParameterServerStrategy, explain_placement,
                        parse_place_group, place, place_guard, plan_transfers, set_cluster)
from .scope import Scope, global_scope
from .sharding import shard_program
from .ssa_graph import OpHandle, SSAGraph, VarHandle, build_graph

__all__ = ["Adam", "Block", "BuildStrategy", "Cluster", "DeviceMesh", "HandPlacement",
           "Layout", "Partial", "Redistribution", "Replicate", "Shard", "count_traffic",
           "plan_redistribution", "redistribute", "redistribute_backward",
           "ParameterServerStrategy", "explain_placement", "parse_place_group", "place",
           "place_guard", "plan_transfers", "set_cluster", "ExecutionError", "ExecutionStrategy", "Executor",
           "GradReducer", "Momentum", "OpHandle", "Operator", "ParallelExecutor", "ParallelMode",
           "PlaceGroup", "Program", "ProgramError", "SGD", "SSAGraph", "Scope", "VarHandle",
           "Variable", "append_backward", "broadcast_parameters", "build_graph",
           "data_parallel_program", "default_main_program", "default_startup_program",
           "default_threads",
           "get_parallel_context", "global_scope", "join", "layers", "program_guard",
           "reset_parallel_context", "reset_unique_names", "set_parallel_context", "shard",
           "shard_program"]
