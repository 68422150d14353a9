#!/usr/bin/env bash
# Session 21 (issue 19): cold first steps of zoo models, rows in both orders, after
# recomputation is realised on min-cut's partition (one min-cut per compile).
#   OUT=dir bash benchmarks/results/2026-11-24_s21_first_steps.sh MODEL [STRATEGY...]
# Calibrates the hardware profile in a process of its own, runs a warm-up process (the
# machine's first Triton compile), then one process per row: the strategies in the order
# given, then in reverse (default: inductor offload:0.5 offload:auto). Logs under $OUT;
# the first-step lines last. FIRST_STEP_ARGS: more arguments for each row (session 22:
# "--sample --out $OUT/stacks"). REVERSE=0: the order given only.
set -u
export PYTHONPATH=$PWD
model=$1; shift
strategies=("$@")
[ ${#strategies[@]} -eq 0 ] && strategies=(inductor offload:0.5 offload:auto)
order=("${strategies[@]}")
if [ "${REVERSE:-1}" = 1 ]; then
  for ((i=${#strategies[@]}-1; i>=0; i--)); do order+=("${strategies[i]}"); done
fi
python -c "from offload_compiler.planning.hardware import profile_for; profile_for('cuda')" \
  > "$OUT/calibrate.log" 2>&1
python benchmarks/first_step.py --model tiny_gpt --strategy inductor --no-timers > "$OUT/warmup.log" 2>&1
for s in "${order[@]}"; do
  timeout 170 python benchmarks/first_step.py --model "$model" --strategy "$s" --no-timers ${FIRST_STEP_ARGS:-} \
    >> "$OUT/$model.log" 2>&1 || echo "$model $s: exit $?" >> "$OUT/$model.log"
done
grep -E "first step|exit" "$OUT/$model.log"
