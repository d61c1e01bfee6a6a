"""Imports every built-in experiment module so that they register themselves (order = `attnsvm list`)."""

from . import tf_trajectories  # noqa: F401
from . import tf_local_convergence  # noqa: F401
from . import tf_svm_rank  # noqa: F401
from . import tf_convergence_types  # noqa: F401
from . import tf_lambda_head  # noqa: F401
from . import tf_feasibility  # noqa: F401
from . import tf_multi_token  # noqa: F401
from . import tf_seq_causal  # noqa: F401
from . import mm  # noqa: F401
from . import lm  # noqa: F401
