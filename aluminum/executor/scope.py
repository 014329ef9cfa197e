"""``Scope``: the variables' values, by name (Paddle's Scope, one level)."""
from __future__ import annotations



class Scope(dict):
    """name -> array.  Persistable variables (parameters, optimizer state) stay between
    runs; feeds are written into it, everything else is overwritten each run."""

    def find_var(self, name: str):
        return self.get(name)


_global = Scope()


def global_scope() -> Scope:
    return _global
