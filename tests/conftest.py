import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

# the tests solve many small problems: one BLAS thread avoids oversubscription on small machines
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(limits=1)
