"""How ``algo="automatic"`` picks an algorithm: the tuning table and its selector
(selector.py), the α-β cost model of each algorithm (costmodel.py) and its two-level variant
for jobs spanning nodes (two_level_model.py).  ``python -m aluminum.bench tune`` writes the
table these read.

Public for the executor and tools, which reach it as ``al.tuning``: the table in use
(``current_table()``, its ``model`` the fitted α, β), where the tuner keeps it
(``user_table_path()``), the α, β assumed without one (``DEFAULT_ALPHA``,
``DEFAULT_BETA``) and those of the link between nodes in use (``inter_node_model()``: the
table's, else measured at ``al.init()``, else 1 Gbit/s).
"""
from . import costmodel, selector, two_level_model
from .costmodel import AlphaBeta
from .selector import (DEFAULT_ALPHA, DEFAULT_BETA, current_table, inter_node_model,
                       user_table_path)

__all__ = ["costmodel", "selector", "two_level_model", "AlphaBeta", "DEFAULT_ALPHA",
           "DEFAULT_BETA", "current_table", "inter_node_model", "user_table_path"]
