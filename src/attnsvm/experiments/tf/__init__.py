"""Transformers as SVMs (transformers-as-svms.md): one module per experiment E1-E8, registered on import."""
