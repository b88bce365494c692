import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
# A fresh compile cache per test session: every distinct compile runs its passes at least once here,
# and nothing is read from (or left in) the user's cache.
os.environ["TILEGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegen-test-cache-")
