"""Live views of a state dir: the status model shared by ``supervise status``, ``top`` and
``serve``, and the views themselves (each behind its own extra)."""
