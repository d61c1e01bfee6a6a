"""The PDAS bordered block of an empty free set is empty (regression: BLAS ger raised ValueError on empty
vectors, which failed 12 of real-digits' SVMs at 539d9f4)."""

import numpy as np

from attnsvm.svm.pdas import BasePDAS


def test_empty_free_set_gives_an_empty_block():
    pdas = BasePDAS.__new__(BasePDAS)
    pdas.beta2 = 0.5
    G = np.eye(3)
    b = np.array([1.0, 2.0, 3.0])
    assert BasePDAS._mblock(pdas, G, b, np.array([], dtype=int)).shape == (0, 0)
    M = BasePDAS._mblock(pdas, G, b, np.array([0, 2]))
    np.testing.assert_allclose(M, np.eye(2) + 0.5 * np.outer([1.0, 3.0], [1.0, 3.0]))
