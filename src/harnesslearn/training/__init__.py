"""Training the proposer: SFT data from a teacher, SFT with LoRA, GRPO with the execution reward.

    from harnesslearn.training import harness_reward, RewardResult   # framework-independent reward
    harnesslearn train sft-data|sft|grpo --config FILE                # the recipes

Files, in the order data flows through them:

- ``config.py``   -- one settings tree per command (the shared groups + lora, trainer, grpo, vllm), loaded
  from YAML + ``--set KEY=VALUE`` by the one loader (``harnesslearn.settings.load``), strict keys.
- ``reward.py``   -- ``harness_reward`` (r = J + 0.05 parsed + 0.10 produced + 0.15 completion,
                     None on infrastructure failure) and the concurrent batch helper.
- ``screen.py``   -- the SFT quality screen and the revision-kind classifier.
- ``contexts.py`` -- GRPO contexts rendered by the test-time proposer format (multistep, varied).
- ``sft_data.py`` -- teacher revisions -> filtered chat JSONL with provenance.
- ``model_io.py`` -- the policy's transformers weights (incl. the embedded Gemma) and LoRA config.
- ``policy.py``   -- the policy being trained as a ModelBackend (multistep rollouts).
- ``sft.py``      -- TRL SFTTrainer + LoRA.
- ``rollouts.py`` -- reward parts to the run store and the rollout export JSONL.
- ``grpo.py``     -- TRL GRPOTrainer with the execution reward.

Torch, transformers, peft and TRL are imported only inside the commands that need them
(``pip install 'harnesslearn[train]'``).
"""

from harnesslearn.training.reward import (
    RewardRequest,
    RewardResult,
    harness_reward,
    harness_rewards,
    reward_value,
)

__all__ = ["RewardRequest", "RewardResult", "harness_reward", "harness_rewards", "reward_value"]
