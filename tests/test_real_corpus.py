"""The offline sentence corpus: at least 2000 distinct prose sentences, seeded, no downloads."""

import numpy as np

from attnsvm.real.sentences import _corpus, corpus_sentences, corpus_size


def test_corpus_has_2000_distinct_sentences():
    assert corpus_size() >= 2000
    sample = corpus_sentences(2000, seed=1)
    assert len(set(sample)) == 2000
    for s in sample[:200]:
        assert s[0].isupper() and s.endswith(".") and 6 <= len(s.split()) <= 30


def test_small_samples_come_from_the_documentation_pool_as_before():
    pool = _corpus()
    rng = np.random.default_rng(3)
    expected = [pool[i] for i in rng.choice(len(pool), size=50, replace=False)]
    assert corpus_sentences(50, seed=3) == expected
    assert corpus_sentences(50, seed=3) == corpus_sentences(50, seed=3)
