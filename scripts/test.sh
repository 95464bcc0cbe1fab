#!/usr/bin/env bash
# Set up, lint, type-check and run the whole test suite. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
echo "[test] ruff" >&2
.venv/bin/ruff check src tests benchmarks experiments examples
echo "[test] mypy" >&2
.venv/bin/mypy src/harnesslearn
echo "[test] pytest" >&2
set +e
.venv/bin/python -m pytest -ra --durations=15 "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "[test] pytest collected no tests" >&2; exit 1; fi
exit "$rc"
