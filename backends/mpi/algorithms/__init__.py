"""Custom MPI algorithms (ring, recursive doubling, Rabenseifner, shared memory).

``CUSTOM_ALGORITHMS[op][name]`` is the State class of algorithm ``name`` for ``op``.
"""
CUSTOM_ALGORITHMS: dict[str, dict[str, type]] = {}
