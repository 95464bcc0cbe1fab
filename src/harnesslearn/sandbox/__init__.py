"""Sandboxed execution of harnesses: ``Executor`` runs ``solve(model, question)`` in isolated
workers and brokers their model and tool calls (see docs/SANDBOX.md)."""

from harnesslearn.sandbox.executor import Executor, ExecutorConfig, IsolationError
from harnesslearn.sandbox.launcher import find_python
from harnesslearn.sandbox.records import Budgets, CallRecord, RunRecord, Status, Tools

__all__ = ["Budgets", "CallRecord", "Executor", "ExecutorConfig", "IsolationError", "RunRecord", "Status", "Tools",
           "find_python"]
