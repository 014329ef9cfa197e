"""Errors of the executor layer; every one is an ``al.AluminumError``."""
from __future__ import annotations

import aluminum as al


class ProgramError(al.ArgumentError):
    """A program that cannot run: an unknown op, an undeclared or never-written variable,
    a shape mismatch, a cycle, a bad feed or fetch.  Raised before anything runs."""


class ExecutionError(al.OperationError):
    """An op failed while running; the message names the op and its place."""
