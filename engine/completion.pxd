# Cython declarations augmenting completion.py (pure-Python mode; aluminum/core/compiled.py).

cpdef mark_done(holder)
