"""``python -m aluminum.bench``: latency sweeps, peer comparison, tuner and cost model.

    python -m aluminum.bench --np 2 allreduce --algo all --compare mpi4py,torch-gloo
    mpiexec -n 4 python -m aluminum.bench allreduce --sizes 4:1MiB --json out.json
    python -m aluminum.bench tune --np 2          # writes the selector's table
    python -m aluminum.bench tune --show          # prints the rules in use
    python -m aluminum.bench model --np 8 --alpha 2us --beta 0.15ns
    python -m aluminum.bench --hosts 2 --np 4 allreduce --link-mbit 1000 --algo ring,hierarchical
    python -m aluminum.bench plot out.json out.png

With ``--np N`` the command starts itself on N ranks with the bundled mpiexec (aluminum's
launcher, which sets what this machine needs); under mpiexec (or with no ``--np``) it runs
directly on the ranks it has. ``tune --np 2,4`` runs one job per size, accumulating rules.
For ``model``, ``--np`` is the number of ranks to predict for: nothing is launched.
"""
from __future__ import annotations

import argparse
import os
import sys

from .sizes import parse_sizes

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK")
_PLACEMENTS = {"both": (True, False), "inplace": (True,), "outofplace": (False,)}
_MODES = {"both": (False, True), "blocking": (False,), "nonblocking": (True,)}
_COMMUNICATORS = {"mpi": "MPICommunicator", "ht": "HostTransferCommunicator",
                  "nccl": "NCCLCommunicator"}


def _sizes_type(text: str) -> str:
    parse_sizes(text)        # reject bad sizes at parse time; --step applies later
    return text


def _parser() -> argparse.ArgumentParser:
    from .ops import ALIASES, SPECS

    parser = argparse.ArgumentParser(prog="python -m aluminum.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", dest="top_np", default=None, metavar="N",
                        help="start N ranks with the bundled mpiexec (also accepted after "
                             "the command)")
    parser.add_argument("--hosts", dest="top_hosts", type=int, default=None, metavar="H",
                        help="with --np: spread the ranks over H emulated hosts (also "
                             "accepted after the command)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="<op>|tune|model|plot")

    def common(sub: argparse.ArgumentParser, iters: int, warmup: int,
               rounds: int | None) -> None:
        sub.add_argument("--np", type=str, default=None, metavar="N",
                         help="start N ranks with the bundled mpiexec (omit under mpiexec)")
        sub.add_argument("--sizes", type=_sizes_type, default="4:64MiB",
                         help="lo:hi (geometric) or a,b,c; units KiB, MiB, GiB (default "
                              "4:64MiB)")
        sub.add_argument("--step", type=int, default=2, help="factor between sizes (2 or 4)")
        sub.add_argument("--backend", default="mpi", help="mpi (default), ht or nccl")
        sub.add_argument("--iters", type=int, default=iters,
                         help=f"timed iterations at small sizes, fewer above 64KiB "
                              f"(default {iters})")
        sub.add_argument("--warmup", type=int, default=warmup,
                         help=f"untimed iterations at small sizes (default {warmup})")
        default_words = (f"default {rounds}" if rounds is not None else
                         f"default {SIDE_BY_SIDE_ROUNDS} when several of our algorithms are "
                         f"compared, else 1")
        sub.add_argument("--rounds", type=int, default=rounds,
                         help=f"measure each point this many times, keep the best round "
                              f"({default_words})")
        sub.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        sub.add_argument("--timeout", type=float, default=None,
                         help="with --np: kill the job after this many seconds")
        sub.add_argument("--hosts", type=int, default=None,
                         help="with --np: spread the ranks over this many emulated hosts "
                              "(network namespaces; needs root)")
        sub.add_argument("--link-mbit", type=float, default=None,
                         help="with --hosts: limit each host's link to this rate")

    for op in [*SPECS, *ALIASES]:
        sub = commands.add_parser(op, help=f"sweep {op}" if op in SPECS else argparse.SUPPRESS)
        common(sub, 1000, 100, None)
        sub.add_argument("--algo", default="automatic",
                         help="comma list of algorithms, 'all', 'automatic' (default); e.g. "
                              "automatic,all")
        sub.add_argument("--compare", default="", help="peers: mpi4py,torch-gloo")
        sub.add_argument("--dtype", default="float32", help="element type (default float32)")
        sub.add_argument("--buffers", choices=("auto", "private", "both"), default="auto",
                         help="run our algorithms on private numpy buffers, or on those and "
                         "on al.shared_empty buffers (series marked [shared]); auto: "
                         "automatic on both for allreduce on the MPI backend, where "
                         "zero-copy applies")
        sub.add_argument("--inplace", action="store_true", help="in place (default: out of "
                                                                "place, as OSU)")
        sub.add_argument("--nonblocking", action="store_true",
                         help="time nonblocking start + wait")
        sub.add_argument("--new-buffers", action="store_true",
                         help="also run each of our algorithms and mpi4py on new buffers "
                              "every call (series marked [new buffers]; the allocation is "
                              "timed with the call)")
        sub.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                         help="write the result as JSON (to stdout without PATH)")
        sub.add_argument("--csv", nargs="?", const="-", default=None, metavar="PATH",
                         help="write the result as CSV (to stdout without PATH)")
        sub.add_argument("--plot", default=None, metavar="PNG", help="latency plot (matplotlib)")

    tune = commands.add_parser("tune", help="measure every algorithm, write the selector table")
    common(tune, 300, 30, 3)
    tune.add_argument("--ops", default="", help="comma list (default: every op with a choice;"
                                                " none: only refit the ping-pong model)")
    tune.add_argument("--output", default=None, help="table path (default: $AL_TUNING_FILE, "
                                                     "else the user cache)")
    tune.add_argument("--note", default="measured by python -m aluminum.bench tune",
                      help="the table's note field")
    tune.add_argument("--placement", choices=("both", "inplace", "outofplace"),
                      default="both", help="which calls to tune for (default both)")
    tune.add_argument("--mode", choices=("both", "blocking", "nonblocking"), default="both",
                      help="blocking calls, nonblocking ones (rules of their own), or both "
                           "(default)")
    tune.add_argument("--jobs", type=int, default=1, metavar="K",
                      help="with --np: measure in K separate jobs and choose what loses least "
                           "in any of them (a job can run Open MPI's calls up to 2x slower "
                           "throughout; default 1)")
    tune.add_argument("--record", default=None, help=argparse.SUPPRESS)   # --jobs plumbing
    tune.add_argument("--earlier", default="", help=argparse.SUPPRESS)
    tune.add_argument("--fresh", action="store_true",
                      help="drop the destination's rules for other comm sizes")
    tune.add_argument("--show", action="store_true", help="print the rules (after tuning, if "
                                                          "--np is given)")

    model = commands.add_parser("model", help="predicted times per algorithm, crossovers")
    model.add_argument("--np", type=int, default=None, metavar="P", help="ranks to model")
    model.add_argument("--alpha", default=None, help="latency, e.g. 2e-6 or 2us (default: "
                                                     "the table's)")
    model.add_argument("--beta", default=None, help="time per byte, e.g. 1.5e-10 or 0.15ns "
                                                    "(default: the table's)")
    model.add_argument("--op", default="all", help="allreduce, reduce_scatter, allgather or "
                                                   "all")
    model.add_argument("--algo", default="", help="comma list (default: every modelled one)")
    model.add_argument("--sizes", type=_sizes_type, default="4:64MiB")
    model.add_argument("--step", type=int, default=2)

    plot = commands.add_parser("plot", help="plot a result saved with --json")
    plot.add_argument("json", help="result file from --json PATH")
    plot.add_argument("png", help="output image")
    return parser


# Our algorithms side by side (--algo all, automatic,all): each point is the best of this many
# rounds, since one disturbed round on a busy machine would otherwise decide a comparison of
# near-equal algorithms ("automatic" is always one of the others under another name).
SIDE_BY_SIDE_ROUNDS = 3


def _shared_series(buffers: str, algos: list[str], op: str, backend: str) -> list[str]:
    """Which of ``algos`` also run on al.shared_empty buffers: all with ``--buffers both``;
    by default ``automatic`` for allreduce on the MPI backend, the one place zero-copy
    applies, so the main job shows what each kind of buffer gets."""
    if buffers == "both":
        return list(algos)
    if buffers == "auto" and op == "allreduce" and backend == "mpi" and "automatic" in algos:
        return ["automatic"]
    return []


def _rounds(asked: int | None, algos: list[str]) -> int:
    if asked is not None:
        return asked
    return SIDE_BY_SIDE_ROUNDS if len(algos) > 1 else 1


def _under_mpiexec() -> bool:
    return any(key in os.environ for key in _MPI_ENV)


def _without_np(argv: list[str], option: str = "--np") -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def _without_jobs(argv: list[str]) -> list[str]:
    return _without_np(argv, "--jobs")


def _launch(nps: list[int], argv: list[str], timeout: float | None, jobs: int = 1,
            hosts: int | None = None, link_mbit: float | None = None) -> int:
    """One job per entry of `nps` (``tune --jobs K``: K jobs each, the first K - 1 recording
    their measurements for the last, which decides); a ``tune --fresh`` starts fresh only in
    the first, so the later jobs add their comm sizes to its table."""
    import tempfile

    code = 0
    for i, n in enumerate(nps):
        if i == 1:
            argv = [arg for arg in argv if arg != "--fresh"]
        with tempfile.TemporaryDirectory(prefix="aluminum-tune-") as folder:
            records = [os.path.join(folder, f"job{k}.json") for k in range(jobs - 1)]
            for k in range(jobs):
                extra = (["--record", records[k]] if k < jobs - 1 else
                         ["--earlier", ",".join(records)] if records else [])
                code = _launch_one(n, [*argv, *extra], timeout, hosts, link_mbit)
                if code:
                    return code
    return code


def _launch_one(n: int, argv: list[str], timeout: float | None, hosts: int | None = None,
                link_mbit: float | None = None) -> int:
    from aluminum.launch import launch

    try:
        return launch(n, [sys.executable, "-m", "aluminum.bench", *argv], timeout=timeout,
                      hosts=hosts, link_mbit=link_mbit).returncode
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - report a failed launch plainly
        print(f"aluminum.bench: launching {n} ranks failed: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.top_np is not None:
        if args.command == "model" and args.np is None:
            try:
                args.np = int(args.top_np)
            except ValueError:
                parser.error(f"--np: expected an integer, got {args.top_np!r}")
        elif args.command not in ("model", "plot"):
            args.np = args.np or args.top_np
    if args.top_hosts is not None and getattr(args, "hosts", None) is None:
        args.hosts = args.top_hosts
    if args.command == "model":
        return _model(args, parser)
    if args.command == "plot":
        return _plot_file(args)
    if args.np is not None and not _under_mpiexec():
        from .sweep import busy_warning

        if not args.quiet and busy_warning():
            print(busy_warning(), file=sys.stderr)
        try:
            nps = [int(n) for n in args.np.split(",")]
        except ValueError:
            parser.error(f"--np: expected N or N,M,... got {args.np!r}")
        if len(nps) > 1 and args.command != "tune":
            parser.error("--np: a list of sizes is only for tune")
        jobs = getattr(args, "jobs", 1)
        if jobs < 1:
            parser.error(f"--jobs: expected at least 1, got {jobs}")
        ranks_argv = _without_jobs(_without_np(argv))
        for option in ("--hosts", "--link-mbit"):
            ranks_argv = _without_np(ranks_argv, option)
        return _launch(nps, ranks_argv, args.timeout, jobs, getattr(args, "hosts", None),
                       getattr(args, "link_mbit", None))
    if args.command == "tune":
        if args.jobs != 1 and args.record is None and not args.earlier:
            parser.error("--jobs: needs --np (each job is a launch of its own)")
        return _tune(args, parser)
    return _sweep(args, parser)


def _model(args, parser) -> int:
    from aluminum.tuning import costmodel

    from .model import default_parameters, format_model, parse_seconds

    if args.np is None or args.np < 1:
        parser.error("model: --np P (the number of ranks to model, >= 1) is required")
    defaults = default_parameters()
    try:
        alpha = defaults.alpha if args.alpha is None else parse_seconds(args.alpha)
        beta = defaults.beta if args.beta is None else parse_seconds(args.beta)
        sizes = parse_sizes(args.sizes, args.step)
    except ValueError as exc:
        parser.error(str(exc))
    op_names = ["allreduce", "reduce_scatter", "allgather"] if args.op == "all" else [args.op]
    for op in op_names:
        known = costmodel.algorithms(op)
        if not known:
            parser.error(f"--op: the model knows allreduce, reduce_scatter and allgather, "
                         f"got {op!r}")
        names = [a for a in args.algo.split(",") if a] or list(known)
        unknown = [a for a in names if a not in known]
        if unknown:
            if args.op != "all":
                parser.error(f"--algo: the model knows {', '.join(known)} for {op}, got "
                             f"{', '.join(unknown)}")
            names = [a for a in names if a in known]
            if not names:
                continue
        print(format_model(op, args.np, alpha, beta, sizes, names))
    return 0


def _plot_file(args) -> int:
    from .plot import PlotUnavailable, plot
    from .report import load_json

    try:
        print(f"wrote {plot(load_json(args.json), args.png)}")
    except (PlotUnavailable, OSError, ValueError) as exc:
        print(f"aluminum.bench plot: {exc}", file=sys.stderr)
        return 1
    return 0


def _communicator(backend: str):
    import aluminum as al

    name = _COMMUNICATORS.get(backend)
    cls = getattr(al, name, None) if name else None
    if cls is None:
        known = ", ".join(n for n, c in _COMMUNICATORS.items() if hasattr(al, c))
        raise LookupError(f"--backend: this aluminum has no communicator for {backend!r} "
                          f"(known: {known})")
    return cls()


def _algos(text: str, op: str, backend: str) -> list[str]:
    import aluminum as al

    try:
        offered = al.algorithms(op, backend)
    except al.AluminumError:
        offered = []
    names: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if token == "all":
            names += offered or ["automatic"]
        elif token == "automatic" or token in offered:
            names.append(token)
        elif token:
            raise LookupError(f"--algo: {op} on the {backend} backend offers "
                              f"{', '.join(offered) or 'no algorithms yet'} (or all, "
                              f"automatic), got {token!r}")
    return list(dict.fromkeys(names)) or ["automatic"]


def _sweep(args, parser) -> int:
    import numpy as np
    from mpi4py import MPI

    import aluminum as al
    from aluminum.core import dtypes

    from . import ops, peers as peer_module, sweep

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    try:
        spec = ops.spec(args.command)
        dtype = dtypes.bfloat16 if args.dtype == "bfloat16" else np.dtype(args.dtype)
        sizes = parse_sizes(args.sizes, args.step)
        peer_names = peer_module.parse_peers(args.compare)
        if spec.name == "send" and world.Get_size() < 2:
            raise ValueError("send/recv ping-pong needs at least 2 ranks (--np 2)")
        comm = _communicator(args.backend)
        algos = _algos(args.algo, spec.name, args.backend)
    except (ValueError, TypeError, LookupError, al.AluminumError) as exc:
        if rank == 0:
            print(f"aluminum.bench: {exc}", file=sys.stderr)
        return 2
    peers = _make_peers(peer_names, world)
    shared = _shared_series(args.buffers, algos, spec.name, args.backend)
    config = sweep.Config(spec.name, sizes, algos, [p.name for p in peers], args.backend,
                          dtype, args.inplace, args.nonblocking, args.iters, args.warmup,
                          not args.quiet, max(1, _rounds(args.rounds, algos)), shared,
                          getattr(args, "new_buffers", False))
    series = sweep.run(config, comm, world, peers)
    for peer in peers:
        peer.close()
    if rank == 0:
        result = _result(config, comm, series)
        _emit(result, args)
    al.finalize()
    return 0


def _make_peers(names: list[str], world) -> list:
    from .peers import PeerUnavailable, make_peer

    made = []
    for name in names:
        try:
            peer, error = make_peer(name, world), ""
        except PeerUnavailable as exc:
            peer, error = None, str(exc)
        errors = world.allgather(error)
        error = next((e for e in errors if e), "")
        if error:
            if world.Get_rank() == 0:
                print(f"[bench] skipping {name}: {error}", file=sys.stderr)
            continue
        made.append(peer)
    return made


def _result(config, comm, series):
    import datetime
    import socket

    from mpi4py import MPI

    import aluminum as al
    from .sweep import Result

    link = ""
    if comm.node_count > 1:
        model, source = al.tuning.inter_node_model()
        link = (f"{8 / model.beta / 1e6:.0f} Mbit/s, α {model.alpha * 1e6:.1f} us "
                f"({source})")
    return Result(config.op, config.backend, comm.size, str(config.dtype), config.inplace,
                  config.nonblocking, series,
                  datetime.datetime.now().isoformat(timespec="seconds"), socket.gethostname(),
                  MPI.Get_library_version().splitlines()[0].split(",")[0].strip(),
                  comm.local_size, link)


def _emit(result, args) -> None:
    from . import report

    outputs = {"json": (args.json, report.dumps_json), "csv": (args.csv, report.dumps_csv)}
    to_stdout = False
    for kind, (where, dump) in outputs.items():
        if where is None:
            continue
        text = dump(result)
        if where == "-":
            sys.stdout.write(text)
            to_stdout = True
        else:
            with open(where, "w", encoding="utf-8") as handle:
                handle.write(text)
            print(f"[bench] wrote {where}", file=sys.stderr)
    if not to_stdout:
        sys.stdout.write(report.format_table(result))
    sys.stdout.flush()
    if args.plot:
        from .plot import PlotUnavailable, plot

        try:
            print(f"[bench] wrote {plot(result, args.plot)}", file=sys.stderr)
        except PlotUnavailable as exc:
            print(f"[bench] no plot: {exc}", file=sys.stderr)


def _tune(args, parser) -> int:
    from mpi4py import MPI

    import aluminum as al
    from aluminum.tuning import selector

    from . import tune

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if args.show and world.Get_size() == 1 and args.np is None:
        import aluminum.backends  # noqa: F401 - registers algorithm names for validation

        sys.stdout.write(tune.format_rules(selector.current_table()))
        return 0
    if world.Get_size() < 2:
        print("aluminum.bench tune: needs at least 2 ranks (--np N or mpiexec -n N)",
              file=sys.stderr)
        return 2
    try:
        comm = _communicator(args.backend)
        sizes = parse_sizes(args.sizes, args.step)
    except (ValueError, LookupError, al.AluminumError) as exc:
        if rank == 0:
            print(f"aluminum.bench tune: {exc}", file=sys.stderr)
        return 2
    only = [op for op in args.ops.split(",") if op] or None
    path = tune.run(comm, world, sizes, iters=args.iters, warmup=args.warmup,
                    rounds=max(1, args.rounds), output=args.output, note=args.note,
                    only=only, placements=_PLACEMENTS[args.placement],
                    nonblocking=_MODES[args.mode], fresh=args.fresh, progress=not args.quiet,
                    record=args.record, earlier=[p for p in args.earlier.split(",") if p])
    if args.record is not None:
        if rank == 0:
            print("[tune] recorded this job's measurements for the deciding job",
                  file=sys.stderr)
        al.finalize()
        return 0
    if rank == 0:
        print(f"[tune] wrote {path}", file=sys.stderr)
        if args.show:
            sys.stdout.write(tune.format_rules(selector.read_table(path)))
    al.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
