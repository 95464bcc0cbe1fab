"""The proposer format, end to end: how a proposer is asked for a revision, how what it writes becomes a
proposal, how a proposal is applied, and one round of revision.

    prompt.py    the prompt's sections (templates in ``prompts/``) from a PromptContext: task, harness,
                 feedback traces, memory entries, earlier attempts
    decode.py    completion -> proposal text: the markers, the lines of ``solve``, the decoders
    formats.py   one class per format (``proposer_format``): render, stop, decode, target; ``resolve``
    edits.py     SEARCH/REPLACE parsing and strict all-or-nothing application (invalid reasons)
    blocks.py    the other side of edits.py: a child harness written as blocks of its parent (SFT targets)
    rounds.py    one round: sample -> judge (apply + score) = revise; best_of, select, candidate_seed

Nothing here opens a store or runs a harness itself: ``rounds.judge`` is given the scorer.
"""
