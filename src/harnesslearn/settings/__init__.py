"""Settings: one composed tree per job, validated at the edge, passed down whole.

- ``base.py``: the engine (``Settings``, ``setting``; strict pydantic validation, one-line errors; the
  flat record a run store keeps; ``changes`` on resume);
- ``groups.py``: the groups the jobs share (``Splits``, ``Sampling``, ``ProposerSettings``,
  ``MemorySettings``, ``RuntimeSettings``, ``Lora``; ``Budgets`` lives with the sandbox that enforces it);
- ``adapt.py``: ``AdaptSettings``, test-time adaptation; the training configs compose the same groups
  (``harnesslearn.training.config``), and so does the transfer experiment (``harnesslearn.transfer.settings``);
- ``load.py``: the one loader, a YAML file and dotted ``KEY=VALUE`` overrides, that the CLI's options are
  generated from (``harnesslearn.cli.options``).

The sandbox's ``Budgets`` is a group of the same kind (a strict, frozen pydantic model) declared where it is
enforced, so that the sandbox imports nothing of this package.
"""
