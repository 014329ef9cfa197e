"""Sharded operators and the SEMI_AUTO_PARALLEL pass (MindSpore's semi-automatic
parallelism): ops carry strategies, the pass lays out every tensor and inserts the
redistributions between layouts.  See docs/auto_parallel.md."""
from .program_pass import Sharded, equivalent, fuse_gradient_sums, shard_program
from .runtime import local_feed, local_scope
from .strategy import OpSharding, Signature, following, from_strategy, normalize_strategy

__all__ = ["OpSharding", "Sharded", "Signature", "equivalent", "following", "from_strategy",
           "fuse_gradient_sums", "local_feed", "local_scope", "normalize_strategy",
           "shard_program"]
