"""Sentences for the real-model experiments, all generated or shipped locally.

* :func:`sentiment_task`: a labelled task generated from templates (seeded). Every
  sentence has exactly 8 words, each a single WordPiece of MiniLM's uncased
  vocabulary, so the tokenized sequences all have ``T = 10`` tokens
  (``[CLS]`` + 8 words + ``[SEP]``) and no padding is needed. The label is the
  polarity of the one sentiment adjective (+1 positive, -1 negative), whose word
  position is returned: it is the token an attention layer should select.
* :func:`corpus_sentences`: plain English sentences read from the Python language
  documentation that ships with the standard library (``pydoc_data.topics``),
  filtered to prose sentences of 6..30 words; a seeded sample of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import ValidationError

# Templates of exactly 8 whitespace-separated words; {n} is a noun, {a} the sentiment adjective.
TEMPLATES = (
    "the {n} was really {a} again today .",
    "i found the {n} quite {a} overall .",
    "my {n} seemed very {a} this time .",
    "our {n} looked rather {a} last week .",
    "honestly , that {n} felt {a} to me",
    "everyone said the {n} was {a} here .",
    "the new {n} is so {a} , really",
    "yesterday the {n} was {a} as usual .",
)
NOUNS = (
    "movie", "food", "hotel", "service", "book", "game", "show", "room", "car", "phone", "song", "class",
    "trip", "meal", "team", "story", "coffee", "city", "park", "house", "film", "album", "school", "garden",
)
POSITIVE = (
    "good", "great", "excellent", "wonderful", "nice", "perfect", "amazing", "fantastic", "pleasant",
    "lovely", "brilliant", "beautiful", "superb", "awesome", "fine", "happy",
)
NEGATIVE = (
    "bad", "terrible", "awful", "horrible", "poor", "boring", "ugly", "dull", "nasty", "miserable",
    "weak", "rude", "sad", "stupid", "wrong", "worse",
)
WORDS_PER_SENTENCE = 8


@dataclass(frozen=True)
class SentenceTask:
    """A labelled sentence task.

    Attributes
    ----------
    sentences : list of n str
    labels : (n,) float64 in {-1, +1}
    keyword : (n,) int, word position (0-based, among the 8 words) of the sentiment word;
        its token index after tokenization is ``keyword + 1`` (after ``[CLS]``)
    words : list of n str, the sentiment word of each sentence
    """

    sentences: list
    labels: np.ndarray
    keyword: np.ndarray
    words: list

    def __len__(self) -> int:
        return len(self.sentences)


def sentiment_task(n: int, seed: int = 0) -> SentenceTask:
    """``n`` template sentences with balanced polarity labels (seeded).

    Parameters
    ----------
    n : number of sentences (>= 2)
    seed : numpy PCG64 seed

    Returns
    -------
    SentenceTask
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValidationError(f"n must be an integer >= 2, got {n!r}")
    rng = np.random.default_rng(seed)
    labels = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    rng.shuffle(labels)
    sentences, keyword, words = [], [], []
    for y in labels:
        template = TEMPLATES[rng.integers(len(TEMPLATES))]
        noun = NOUNS[rng.integers(len(NOUNS))]
        pool = POSITIVE if y > 0 else NEGATIVE
        adj = pool[rng.integers(len(pool))]
        text = template.format(n=noun, a=adj)
        sentences.append(text)
        keyword.append(template.split().index("{a}"))
        words.append(adj)
    return SentenceTask(sentences, labels, np.asarray(keyword, dtype=np.int64), words)


_SENTENCE = re.compile(r"[A-Z][A-Za-z ,;:'()\-]*[a-z][.]")


def _corpus() -> list:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped Python builds
        return []
    text = re.sub(r"\s+", " ", " ".join(topics[k] for k in sorted(topics)))
    out, seen = [], set()
    for s in re.split(r"(?<=[.!?])\s+", text):
        if 6 <= len(s.split()) <= 30 and _SENTENCE.fullmatch(s) and s not in seen:
            seen.add(s)
            out.append(s)
    return out


def corpus_sentences(n: int, seed: int = 0) -> list:
    """A seeded sample of ``n`` English sentences from the stdlib's Python documentation.

    Falls back to template sentences (:func:`sentiment_task`) when ``pydoc_data`` is
    missing; sentences are drawn with replacement only if ``n`` exceeds the corpus
    (about 480 sentences).

    Returns
    -------
    list of n str
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValidationError(f"n must be an integer >= 1, got {n!r}")
    pool = _corpus()
    if not pool:  # pragma: no cover
        return sentiment_task(max(n, 2), seed).sentences[:n]
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(pool), size=n, replace=n > len(pool))
    return [pool[i] for i in idx]
