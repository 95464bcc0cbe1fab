"""The tests' names for the server helpers, which live in the package (``harnesslearn.models.served``)."""

from __future__ import annotations

from harnesslearn.models.served import ServerProcess, free_port, llama_server, llamacpp_argv

__all__ = ["ServerProcess", "free_port", "llama_server", "llamacpp_argv"]
