"""Exceptions raised by attnsvm.

Every error a user can cause derives from :class:`AttnSVMError`; errors about bad
arguments also derive from :class:`ValueError`, so ``except ValueError`` keeps
working for code that does not know about this package.
"""


class AttnSVMError(Exception):
    """Base class of every error raised on purpose by attnsvm."""


class ValidationError(AttnSVMError, ValueError):
    """An argument has the wrong shape, dtype, range or value."""


class ProblemFileError(ValidationError):
    """A problem or solution file is missing, corrupt, truncated or not ours."""
