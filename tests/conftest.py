"""Settings for the whole suite."""

import os
from pathlib import Path

import pytest

# pytest-xdist runs two workers on two cores: one intra-op thread per process (torch would otherwise start
# one per core in every worker and every selfsup-train it launches, and the processes would fight for cores)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """The data cache (token caches, tokenizers, random-init baselines) that the worker's tests share."""
    return tmp_path_factory.mktemp("cache")
