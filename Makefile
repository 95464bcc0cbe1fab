.PHONY: demo test setup bench

# Set up everything, then run the main job: the shipped RL proposer and the embedded Qwen solver on a family
# the proposer was not trained on (`harnesslearn demo --model local:gemma-3-270m` is the one-minute smoke).
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
