#!/usr/bin/env bash
# Recipe 5: UnityMAS-O with GAE. The reflective code loop (Planner -> Coder -> Reflector rounds, a fixed
# workflow), per-turn rewards from the code_delta allocator (each round's change in test pass rate), and
# what the paper ran: PPO with GAE and a critic per trained model (algo.options mode: gae).
#
#   bash examples/05_unitymas_gae.sh                        # embedded-sft, 4 steps of 1 task x 4 executions
#   STEPS=14 bash examples/05_unitymas_gae.sh               # the CPU curve's length (config unity_code_cpu)
#
# Size knobs (environment): MODEL, STEPS, N (executions per task), CRITIC_LR, OUT.
# Further arguments go to train-metaagent (`--config unity_code`: 2 tasks a step).
set -euo pipefail
MODEL=${MODEL:-embedded-sft}
STEPS=${STEPS:-4}
N=${N:-4}
CRITIC_LR=${CRITIC_LR:-1e-5}
OUT=${OUT:-runs/examples/unitymas_gae}

train-metaagent --config unity_code_cpu --model "$MODEL" --steps "$STEPS" --n-executions "$N" \
                --algo.options '{mode: gae, gamma: 1.0, lam: 1.0}' --critic.lr "$CRITIC_LR" \
                --out "$OUT" "$@"

# per-role turn rewards (reward/turn/<role>), rounds used (rollout/rounds_used) and the critic's loss
# (train/critic/vf_loss) per step are in $OUT/metrics.jsonl; the critic's weights in the checkpoint's critics/
