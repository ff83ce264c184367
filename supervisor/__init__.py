"""supervise: a declarative supervisor for coding-agent sessions in tmux."""

__version__ = "0.2.0"

#: The distribution name on PyPI (``supervise`` there is an unrelated project of 2014); the
#: import package stays ``supervisor`` and the command ``supervise``.
DISTRIBUTION = "supervise-agents"
