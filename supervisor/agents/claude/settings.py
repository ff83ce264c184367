"""The ``[agent]`` keys ``kind = "claude"`` adds to the profile (:class:`ClaudeSettings`,
registered by :mod:`.kind`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator


class ClaudeSettings(BaseModel):
    """The ``[agent]`` keys of Claude Code (see ``config.AgentSpec``, which takes them as
    its own): ``binary`` (the CLI: a name on ``PATH`` or a path), ``permission_mode``,
    ``resume_prompt`` (the prompt of ``--resume``), ``extra_args`` (appended to the argv)
    and ``hooks`` (inject the hook settings)."""

    model_config = ConfigDict(extra="forbid")
    binary: str = Field(default="claude", min_length=1)
    permission_mode: str = Field(default="manual", pattern=r"^[A-Za-z]+$")
    resume_prompt: str = Field(default="continue the task", min_length=1)
    extra_args: list[str] = Field(default_factory=list)
    hooks: Annotated[bool, Strict()] = True

    # what would fail every launch with E2BIG (Linux's 128 KiB per string; issue 21)
    @field_validator("extra_args")
    @classmethod
    def _check_args(cls, value: list[str]) -> list[str]:
        from supervisor.config.argsize import check_args  # config loads this model

        return check_args(value)

    @field_validator("resume_prompt")
    @classmethod
    def _check_resume(cls, value: str) -> str:
        from supervisor.config.argsize import check_resume_prompt

        return check_resume_prompt(value)
