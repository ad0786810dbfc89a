"""Closed-form model of Predictive Pipelined Decoding (PPD; Yang et al., TMLR 2024).

Pure numpy/scipy/sympy math: Theorem 4.1, the exact law of the latency, the ell -> infinity
approximations (Eq. 3, 5, 6) and the paper's reported tables (``ppdmodel.paper``).
"""
