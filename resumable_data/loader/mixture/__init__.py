"""The loader side of ``rd.Mixture``: its state section checked on a resume, ``data_change``
rebases, per-source progress and token counts.

Modules: :mod:`.state` (the unpacked section: resume checks, the saved counting plan, tokens per
source), :mod:`.packed` (a packed mixture: window-boundary changes, per-source counts of packed
sequences), :mod:`.progress` (the per-source progress record).
"""
