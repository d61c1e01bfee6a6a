"""Causal language modeling (causal-language-modeling.md): the lm-* experiments and their shared settings."""
