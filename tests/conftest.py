"""Settings for the whole suite."""

import os

# pytest-xdist runs two workers on two cores: one intra-op thread per process (torch would otherwise start
# one per core in every worker and every selfsup-train it launches, and the processes would fight for cores)
os.environ.setdefault("OMP_NUM_THREADS", "1")
