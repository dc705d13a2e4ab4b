"""models: what the decoder loads, and the draft-folder format.

    targets.py       --target / --draft specs: default (the embedded GGUF), HF folder, Hub id, .gguf; random weights
    draft_folder.py  the draft folder: weights, config, specdistill.json, vocabulary map (the one reader and writer)
    layer_cut.py     drafts cut from a target's own layers, reading only the tensors they keep
    feature_head.py  EAGLE-3-style heads: the model, its speculators eagle3 folder, its decoding step
    shapes.py        model shapes for measuring with random weights (Llama-3.1-8B's, a tiny one)
"""
