"""What every layer shares and that imports nothing above it: errors, dtypes, the Buffer
record and its parsing, reduction ops and their kernels, tracing.

The engine, the backends and the public API all build on this package; nothing here imports
from them (``tests/test_layers.py`` checks).
"""
