import atexit
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# Under pytest-xdist (the README's test command runs one worker per core): one thread per worker for
# torch and NumPy's BLAS, set before either is imported, so that the workers do not oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
# A fresh compile cache per test session, shared by the session's pytest-xdist workers: every distinct
# compile runs its passes once here (not once per worker), and nothing is read from (or left in) the
# user's cache. The process that starts the session (pytest alone, or xdist's controller, which loads
# this file before it starts the workers: they inherit the folder through the environment) makes the
# folder and removes it when it exits (not a child it forks). Concurrent writers are safe: the cache
# writes each entry to a temporary file and renames it (tilegen.core.cache.cached).
if not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TILEGEN_TEST_CACHE_DIR")):
    _cache, _owner = tempfile.mkdtemp(prefix="tilegen-test-cache-"), os.getpid()
    os.environ["TILEGEN_TEST_CACHE_DIR"] = _cache
    atexit.register(lambda: os.getpid() == _owner and shutil.rmtree(_cache, ignore_errors=True))
os.environ["TILEGEN_CACHE_DIR"] = os.environ["TILEGEN_TEST_CACHE_DIR"]
# Triton decides when it is imported whether @triton.jit builds interpreter functions (its own tl.max
# and friends included), and some test modules import it indirectly at collection (transformers does):
# on a machine without an NVIDIA GPU, set TRITON_INTERPRET before any of them, so that the Triton tests
# run the generated kernels in the interpreter whatever the collection order.
if "TRITON_INTERPRET" not in os.environ and not os.path.exists("/dev/nvidia0"):
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` (the longest, ten seconds and more each) run first, in their collected
    order, then the rest: under pytest-xdist the short tests then fill the end of the run, so that the
    workers finish together instead of one running a long test alone at the end. (First among the
    plugins' reorderings, so that --failed-first and the like still apply on top.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Work stealing (pytest-xdist's ``--dist worksteal``) for ``-n`` without a ``--dist`` of the
    caller's: each worker starts with half of the tests, and one that runs out takes half of the other's
    queue, to the end of the run. (``load``, xdist's default, hands out chunks it never takes back: a
    long test late in a chunk leaves the other worker idle at the end.)"""
    if config.getoption("dist") == "load" and not any(a.startswith(("--dist", "-d")) for a in config.invocation_params.args):
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)
    return None
