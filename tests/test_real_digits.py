"""Digits patch tokens (scikit-learn's bundled 8x8 digits, no download)."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.digits import digits_task, load_images, patch_box, patch_tokens, positional_codes  # noqa: E402


@pytest.mark.parametrize("p", [1, 2, 4])
def test_patch_tokens_cut_the_image_exactly(p):
    images, _ = load_images()
    imgs = images[:5]
    X = patch_tokens(imgs, patch=p, positional="onehot")
    g = 8 // p
    assert X.shape == (5, g * g, p * p + g * g) and X.dtype == np.float64
    for t in (0, g * g - 1, g + 1 if g > 1 else 0):
        r, c = patch_box(t, p)
        np.testing.assert_array_equal(X[:, t, : p * p], imgs[:, r:r + p, c:c + p].reshape(5, -1) / 16.0)
        np.testing.assert_array_equal(X[:, t, p * p:], np.broadcast_to(np.eye(g * g)[t], (5, g * g)))


def test_positional_codes_and_bad_patch():
    assert positional_codes(4, "none").shape == (16, 0)
    S = positional_codes(4, "sinusoidal", n_freq=3)
    assert S.shape == (16, 12) and len({tuple(r) for r in S.round(12)}) == 16  # every patch distinct
    for bad in (3, 8, 0, 2.0, True):
        with pytest.raises(ValidationError, match="patch"):
            patch_tokens(np.zeros((1, 8, 8)), patch=bad)
    with pytest.raises(ValidationError, match="positional"):
        positional_codes(4, "learned")
    with pytest.raises(ValidationError, match=r"\(n, 8, 8\)"):
        patch_tokens(np.zeros((2, 7, 8)))


def test_digits_task_problems():
    dt = digits_task((3, 8), patch=2, positional="sinusoidal", query="mean", max_train=40, seed=1)
    tr, te = dt.train, dt.test
    assert tr.X.shape == (40, 16, 4 + 8) and tr.mode == "cross" and te.d == tr.d
    assert set(np.unique(tr.Y)) == {-1.0, 1.0} and abs(tr.Y.sum()) <= 2  # stratified
    np.testing.assert_allclose(tr.Z, tr.X.mean(axis=1))
    assert te.n == 179  # half of the 357 threes and eights; max_train only thins the training split
    assert dt.head_train_accuracy > 0.5 and dt.images_test.shape == (te.n, 8, 8)
    fixed = digits_task((0, 1), patch=4, query="fixed", positional="none", max_train=10)
    np.testing.assert_allclose(fixed.train.Z, 1 / np.sqrt(16))
    with pytest.raises(ValidationError, match="distinct"):
        digits_task((3, 3))
    with pytest.raises(ValidationError, match="query"):
        digits_task((3, 8), query="cls")
