# Cython declarations augmenting calls.py (pure-Python mode; aluminum/core/compiled.py).

from aluminum.recall cimport ran_known, started_known
