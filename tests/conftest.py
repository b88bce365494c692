import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
# Under pytest-xdist (the README's test command runs one worker per core): one thread per worker for
# torch and NumPy's BLAS, set before either is imported, so that the workers do not oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
# A fresh compile cache per test session: every distinct compile runs its passes at least once here,
# and nothing is read from (or left in) the user's cache.
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-test-cache-")
# Triton decides when it is imported whether @triton.jit builds interpreter functions (its own tl.max
# and friends included), and some test modules import it indirectly at collection (transformers does):
# on a machine without an NVIDIA GPU, set TRITON_INTERPRET before any of them, so that the Triton tests
# run the generated kernels in the interpreter whatever the collection order.
if "TRITON_INTERPRET" not in os.environ and not os.path.exists("/dev/nvidia0"):
    os.environ["TRITON_INTERPRET"] = "1"
