"""Imports every built-in experiment module so that they register themselves (order = `attnsvm list`)."""

from . import tf_trajectories  # noqa: F401
from . import tf_local_convergence  # noqa: F401
from . import tf_svm_rank  # noqa: F401
from . import tf_convergence_types  # noqa: F401
from . import tf_lambda_head  # noqa: F401
from . import tf_feasibility  # noqa: F401
from . import tf_multi_token  # noqa: F401
from . import tf_seq_causal  # noqa: F401
from . import mm_single_input  # noqa: F401
from . import mm_multi_input  # noqa: F401
from . import mm_joint  # noqa: F401
from . import mm_loss_functions  # noqa: F401
from . import mm_regularization_path  # noqa: F401
from . import lm_cosine  # noqa: F401
from . import lm_margins  # noqa: F401
from . import lm_stability  # noqa: F401
from . import real  # noqa: F401
