"""Starting MPI jobs on this machine: ``launch`` (the bundled ``mpiexec`` with the settings
this machine needs), emulated hosts (network namespaces, ``--hosts``) and the command line
behind ``python -m aluminum.run`` (cli.py).  Nothing here is imported by ``import
aluminum``."""
from .emulated_hosts import EmulatedHostsError, check_privilege, emulated_hosts, leftovers
from .launcher import launch

__all__ = ["launch", "emulated_hosts", "EmulatedHostsError", "check_privilege", "leftovers"]
