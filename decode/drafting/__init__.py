"""drafting: the speculative loop and where its proposals come from.

    speculative.py  generate(): propose -> verify -> accept -> rollback, and its Stats
    proposers.py    a round's proposal: a draft's chain, a feature head's, context lookup
    tree.py         token trees: grown level by level, verified under one tree mask, walked greedily or sampled
    lookup.py       context lookup: the longest earlier match of the last n-gram
    sampling.py     logits -> the next-token distribution, identically for draft and target
    lossless.py     when a greedy output is lossless: exact in float32, near-ties within ε in bf16/fp16
"""
