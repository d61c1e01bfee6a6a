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


class ResourceLimitError(AttnSVMError, MemoryError):
    """Work that would need more memory than the package's ``max_memory`` limit allows."""


class NonFiniteError(AttnSVMError, FloatingPointError):
    """A computation's state became NaN or infinite (e.g. a training run diverged).

    ``run`` and ``step`` (when known) locate the first non-finite value found.
    """

    def __init__(self, message: str, *, run: int | None = None, step: int | None = None):
        super().__init__(message)
        self.run, self.step = run, step
