"""Sentences for the real-model experiments, all generated or shipped locally.

* :func:`sentiment_task`: a labelled task generated from templates (seeded). Every
  sentence has exactly 8 words, each a single WordPiece of MiniLM's uncased
  vocabulary, so the tokenized sequences all have ``T = 10`` tokens
  (``[CLS]`` + 8 words + ``[SEP]``) and no padding is needed. The label is the
  polarity of the one sentiment adjective (+1 positive, -1 negative), whose word
  position is returned: it is the token an attention layer should select.
* :func:`corpus_sentences`: plain English sentences read from text that ships with
  Python: first the language documentation (``pydoc_data.topics``, about 480
  sentences), then the docstrings of the standard library's own source files
  (read with :mod:`ast`, never imported; several thousand more), filtered to prose
  sentences of 6..30 words; a seeded sample of them. No download is involved; the
  exact pool depends on the Python version.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sysconfig
from dataclasses import dataclass

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.generators import _check_seed as check_seed  # the package's one seed check (integer >= 0)

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
    seed : numpy PCG64 seed, an integer >= 0

    Returns
    -------
    SentenceTask
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValidationError(f"n must be an integer >= 2, got {n!r}")
    rng = np.random.default_rng(check_seed(seed))
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


def _prose(text: str, seen: set) -> list:
    """The prose sentences of ``text`` (6..30 words, letters and light punctuation) not in ``seen``."""
    out = []
    for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text)):
        if 6 <= len(s.split()) <= 30 and _SENTENCE.fullmatch(s) and s not in seen:
            seen.add(s)
            out.append(s)
    return out


@functools.lru_cache(maxsize=1)
def _pydoc_corpus() -> tuple:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped Python builds
        return ()
    return tuple(_prose(" ".join(topics[k] for k in sorted(topics)), set()))


_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


@functools.lru_cache(maxsize=1)
def _docstring_corpus() -> tuple:
    """Prose sentences of the docstrings of the standard library's source files, in a fixed order.

    Files are parsed with :mod:`ast` (nothing is imported or executed); test suites are skipped.
    """
    root = sysconfig.get_paths().get("stdlib", "")
    seen = set(_pydoc_corpus())
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for fname in sorted(f for f in filenames if f.endswith(".py")):
            try:
                with open(os.path.join(dirpath, fname), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        out += _prose(doc, seen)
    return tuple(out)


def _corpus() -> list:
    """The documentation sentences (pydoc topics) only: the pool of the first 480 or so draws."""
    return list(_pydoc_corpus())


def corpus_size() -> int:
    """Distinct sentences available to :func:`corpus_sentences` (documentation + stdlib docstrings)."""
    return len(_pydoc_corpus()) + len(_docstring_corpus())


def corpus_sentences(n: int, seed: int = 0) -> list:
    """A seeded sample of ``n`` distinct English sentences from text that ships with Python.

    Up to the size of the documentation pool (about 480 sentences) the sample comes from
    the documentation alone (unchanged from earlier releases); beyond it, from the
    documentation and the standard library's docstrings together (:func:`corpus_size`,
    several thousand). Sentences repeat only if ``n`` exceeds the whole corpus. Falls
    back to template sentences (:func:`sentiment_task`) when ``pydoc_data`` is missing.

    Returns
    -------
    list of n str
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValidationError(f"n must be an integer >= 1, got {n!r}")
    seed = check_seed(seed)
    pool = _corpus()
    if not pool:  # pragma: no cover
        return sentiment_task(max(n, 2), seed).sentences[:n]
    if n > len(pool):
        pool = pool + list(_docstring_corpus())
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(pool), size=n, replace=n > len(pool))
    return [pool[i] for i in idx]
