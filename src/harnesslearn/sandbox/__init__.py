"""Sandboxed execution of harnesses: ``Executor`` runs ``solve(model, question)`` in isolated
workers and brokers their model and tool calls (see docs/SANDBOX.md); ``RayExecutor`` spreads
the same over the nodes of a Ray cluster (ray itself is imported only when it connects);
``build_executor`` picks one from an option string."""

from harnesslearn.sandbox.executor import Executor, ExecutorConfig, IsolationError
from harnesslearn.sandbox.executors import build_executor, parse_executor
from harnesslearn.sandbox.launcher import find_python
from harnesslearn.sandbox.ray_executor import RayConfig, RayExecutor
from harnesslearn.sandbox.records import Budgets, CallRecord, RunRecord, Status, Tools

__all__ = ["Budgets", "CallRecord", "Executor", "ExecutorConfig", "IsolationError", "RayConfig", "RayExecutor",
           "RunRecord", "Status", "Tools", "build_executor", "find_python", "parse_executor"]
