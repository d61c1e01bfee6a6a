"""What the HTML pages (report.html, probe.html) share: the script that opens a closed ``<details>`` when a link
points into it."""

from __future__ import annotations

#: a link (``#id``, on load or on a hash change) to an element in a closed ``<details>``, or to the ``<details>``
#: itself, opens it and every closed one around it, then scrolls to the element. Without JavaScript the link lands
#: on the closed section's summary line, and a click opens it.
REVEAL_SCRIPT = r"""
(function () {
  function reveal() {
    const t = location.hash.length > 1 && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!t) return;
    let opened = false;
    for (let d = t.closest('details'); d; d = d.parentElement && d.parentElement.closest('details')) {
      if (!d.open) { d.open = true; opened = true; }
    }
    if (opened) t.scrollIntoView();
  }
  window.addEventListener('hashchange', reveal);
  reveal();
})();
"""
