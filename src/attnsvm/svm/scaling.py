"""The row scaling's former module: :class:`~attnsvm.svm.reductions.RowScaling` and
:func:`~attnsvm.svm.reductions.representable` are in :mod:`attnsvm.svm.reductions` with the other reductions.

Kept so that ``from attnsvm.svm.scaling import RowScaling`` keeps working; new code imports from
:mod:`attnsvm.svm.reductions`.
"""

from __future__ import annotations

from attnsvm.svm.reductions import RowScaling, representable

__all__ = ["RowScaling", "representable"]
