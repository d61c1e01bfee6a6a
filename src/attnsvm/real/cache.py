"""The probe's one cache (per process): loaded models and the last forward pass.

A probe runs many steps on one model and one set of sentences: the heads of a layer, their null
heads, the stored probe's tasks (one per head, possibly in one worker process), the view. They
share

* **models** (:func:`cached_model`): at most :data:`MAX_MODELS` loaded models, keyed by the content
  of their files (:func:`files_digest`: a SHA-256 of every file of the directory, computed again only
  when a file's name, size, inode, modification or change time differs, so a directory whose files were
  rewritten in place, even with the same size and the modification time set back, is loaded again),
  least recently used dropped first;
* **the last forward pass** (:func:`forward`): the hidden states and attention maps of the last
  (model, sentences, max_length), reused while they stay the same;
* **arrays derived from it** (:func:`derived`): at most :data:`MAX_DERIVED`, e.g. a layer's SVM inputs
  that the stored probe's consecutive tasks of one layer share, dropped with the forward pass.

:func:`attnsvm.real.minilm.load_minilm`, :func:`attnsvm.real.minilm.load_model` and
:func:`attnsvm.real.probe_steps.prepare_probe` read through it; :func:`clear` empties it.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict

from attnsvm._files import folder_digest

#: loaded models kept at most (the shipped MiniLM and two model directories, say)
MAX_MODELS = 3
#: arrays derived from the cached forward pass kept at most (a layer's SVM inputs at 1000 sentences are ~150 MB)
MAX_DERIVED = 2
_MODELS: OrderedDict = OrderedDict()
_FORWARD: dict = {}
_DERIVED: OrderedDict = OrderedDict()
#: content digests of model directories by their :func:`files_stamp` (a few kept)
_DIGESTS: OrderedDict = OrderedDict()


def files_stamp(path) -> tuple | None:
    """``((name, size, inode, mtime_ns, ctime_ns), ...)`` of the regular files directly in the directory
    ``path``, sorted; None when ``path`` is not a readable directory (the loader then says why). Writing a
    file changes its change time (``ctime``), which, unlike the modification time, cannot be set back."""
    try:
        entries = sorted(os.scandir(os.fspath(path)), key=lambda e: e.name)
        stats = [(e.name, e.stat()) for e in entries if e.is_file()]
        return tuple((name, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns) for name, st in stats)
    except OSError:
        return None


def files_digest(path) -> str | None:
    """``sha256:<hex>`` of the files of the directory ``path`` (:func:`attnsvm._files.folder_digest`: names,
    sizes and bytes), hashed once per :func:`files_stamp` of the directory, i.e. again only after a file
    changed; None when it cannot be read (the loader then says why)."""
    stamp = files_stamp(path)
    if stamp is None:
        return None
    key = (os.path.realpath(os.fspath(path)), stamp)
    if key not in _DIGESTS:
        try:
            digest = folder_digest(os.fspath(path))
        except OSError:
            return None
        if files_stamp(path) != stamp:      # changed while hashed: not a digest of one state of the files
            return None
        _lru(_DIGESTS, key, lambda: digest, 2 * MAX_MODELS)
    else:
        _DIGESTS.move_to_end(key)
    return _DIGESTS[key]


def cached_model(key, load):
    """The model cached under ``key`` (hashable), or ``load()`` stored under it (the least recently
    used of more than :data:`MAX_MODELS` dropped). ``key`` None: ``load()`` uncached."""
    if key is None:
        return load()
    return _lru(_MODELS, key, load, MAX_MODELS)


def _lru(cache, key, build, limit: int):
    """``cache[key]`` (an OrderedDict, marked most recently used), else ``build()`` stored under ``key``, the
    least recently used entries beyond ``limit`` dropped."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = build()
    cache[key] = value
    while len(cache) > limit:
        cache.popitem(last=False)
    return value


def forward(model, sentences: list, *, max_length: int, max_memory=None):
    """``model.forward(sentences, attentions=True)`` (a :class:`attnsvm.real.pretrained.Forward`, hidden
    ``(L + 1, n, T, d)``, attentions ``(L, n, H, T, T)``), reused when the last call had the same model
    object, sentences and ``max_length``.

    Returns
    -------
    (Forward, cached: bool, seconds: float) -- seconds of the pass (about 0 when cached)
    """
    t0 = time.perf_counter()
    key = (id(model), tuple(sentences), int(max_length))
    if _FORWARD.get("key") == key:
        return _FORWARD["forward"], True, time.perf_counter() - t0
    fw = model.forward(sentences, max_length=max_length, attentions=True, max_memory=max_memory)
    _FORWARD.clear()
    _DERIVED.clear()
    _FORWARD.update(key=key, forward=fw, model=model)  # holding the model keeps its id unique
    return fw, False, time.perf_counter() - t0


def last_forward():
    """The cached forward pass (None when there is none)."""
    return _FORWARD.get("forward")


def derived(fw, key, build):
    """``build()``, kept under the hashable ``key`` while ``fw`` is the cached forward pass (:func:`forward`): the
    same object comes back for the same ``key``, so ``key`` must name everything ``build`` reads besides ``fw``
    (at most :data:`MAX_DERIVED` kept, least recently used dropped first; the caller must not modify it).
    ``build()`` uncached when ``fw`` is not the cached pass."""
    if fw is None or _FORWARD.get("forward") is not fw:
        return build()
    return _lru(_DERIVED, key, build, MAX_DERIVED)


def clear() -> None:
    """Forget every cached model, forward pass and derived array."""
    _MODELS.clear()
    _FORWARD.clear()
    _DERIVED.clear()
    _DIGESTS.clear()
