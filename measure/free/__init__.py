"""FREE (Bae et al., EMNLP 2023): shallow-deep early exit with synchronized parallel decoding.

``decode``: ``free_generate`` (modes sync, copy, oracle) on the layer-split machinery;
``threshold``: the Beta-mixture adaptive threshold (section 5.3, Algorithm 1);
``quality``: agreement with greedy decoding and ROUGE-L. Approximate, unlike PPD: a token that
exits takes the shallow model's prediction.
"""
