"""Real data: digit patches, MiniLM token states and MiniLM's pretrained heads (the ``real`` extra)."""
