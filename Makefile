.PHONY: demo test setup bench

# Set up everything, then run the main job on the embedded default model.
demo:
	bash scripts/setup.sh
	.venv/bin/harnesslearn demo

# Set up everything (with the test extras), then lint, type-check and run the tests.
test:
	bash scripts/test.sh

setup:
	bash scripts/setup.sh --test

bench:
	.venv/bin/python benchmarks/executor_overhead.py
	.venv/bin/python benchmarks/model_throughput.py
