"""Live views of a state dir: the status model every view shares (:mod:`.model`), ``supervise
status``'s printing (:mod:`.status`) and ``supervise top`` (:mod:`.tui`, needs the ``tui``
extra: Textual). Nothing here is imported by the engine.
"""
