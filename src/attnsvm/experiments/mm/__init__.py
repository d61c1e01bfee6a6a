"""Max-margin token selection in attention (max-margin-token-selection.md): prompt attention, one module per figure."""
