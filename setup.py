import re
from pathlib import Path

from setuptools import find_packages, setup

# the version lives in paddle_edo/__init__.py alone
VERSION = re.search(r'^__version__ = "([^"]+)"', Path(__file__).with_name("paddle_edo").joinpath("__init__.py")
                    .read_text(encoding="utf-8"), re.M).group(1)

setup(
    name="paddle_edo",
    version=VERSION,
    description="PaddlePaddle embedding tables that cost less memory: quantized, shared, cached, monitored",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["paddle_edo", "paddle_edo.*"]),
    # compiled at first use (a C++ compiler is needed)
    package_data={"paddle_edo.kernels": ["*.cc", "*.h"]},
    python_requires=">=3.8",
    # Paddle itself is an extra: the CPU and GPU builds are different packages that must not both install,
    # and an environment that has a Paddle keeps it (with its numpy and protobuf). The pins Paddle 2.6.2
    # needs come with its extras only.
    install_requires=[
        "numpy",
        "PyYAML>=5.4",
        "scipy",  # the planner's least-squares fits of shared rows: sparse products
        "visualdl==2.5.3",  # imports beside Paddle 3.3.1, numpy 2 and protobuf 7 too (measured)
        "jieba==0.42.1",
        "pyarrow>=15",  # users' files: CSV / Parquet readers, hash aggregation for vocabularies
    ],
    extras_require={
        # protobuf 5+ breaks 2.6.2's fleet.DistributedStrategy; numpy 2 breaks its wheels
        "paddle26": ["paddlepaddle==2.6.2", "numpy<2", "protobuf<5"],
        "paddle26-gpu": ["paddlepaddle-gpu==2.6.2", "numpy<2", "protobuf<5"],
        "paddle3": ["paddlepaddle>=3.0"],  # everything but parameter servers (CPU wheels from 3.1.1 on lack them)
        "cpu": ["paddlepaddle==2.6.2", "numpy<2", "protobuf<5"],  # the old names of the paddle26 extras
        "gpu": ["paddlepaddle-gpu==2.6.2", "numpy<2", "protobuf<5"],
        "test": ["pytest>=7", "pytest-xdist>=3"],
        "docs": ["sphinx>=7", "myst-parser>=2"],  # make docs: the guides and the API reference
        "faiss": ["faiss-cpu"],  # ClusteredEmbedding's K-Means runs on faiss when present, numpy otherwise
        # tools/serve_tables.py's HTTP service (paddle_edo.serving.create_app) and the Redis store (a Redis server
        # itself comes from the system: Debian's redis-server)
        "serving": ["starlette>=0.37", "uvicorn>=0.29", "faiss-cpu", "redis>=5", "hiredis"],
        # benchmark-only peers and clients (never needed by the package): bench.py serving's load test, bench.py
        # text's TF-IDF baseline and People's Daily word vectors (tools/get_data.py word-vectors)
        "bench": ["aiohttp", "scikit-learn", "gensim>=4.3"],
        # paddlenlp 2.8.1 beside Paddle 2.6 (with 2.6's pins: its requirements would lift protobuf to 7, which
        # breaks fleet.DistributedStrategy): newer releases of these break its import (zlib clashes with
        # libpaddle's own copy, API changes); measured in a fresh venv
        "nlp": ["paddlenlp==2.8.1", "numpy<2", "protobuf<5", "huggingface_hub<0.26", "aistudio-sdk<0.2",
                "datasets<3", "pyarrow<18", "scipy<1.17", "scikit-learn<1.7", "aiohttp<3.14"],
    },
)
