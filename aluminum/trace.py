"""Chrome-trace recording of API calls and engine events (``AL_TRACE=<path>``)."""
ENABLED = False


def api_call(op: str, comm, nbytes: int, algo: str, blocking: bool) -> None:
    """Record one API call (only called when ``ENABLED``)."""
