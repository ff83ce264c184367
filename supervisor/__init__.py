"""supervise: a declarative supervisor for coding-agent sessions in tmux."""

__version__ = "0.1.0"
