set -u
mkdir -p $OUT/stacks
FIRST_STEP_ARGS="--sample --out $OUT/stacks" bash benchmarks/results/2026-11-24_s21_first_steps.sh llama > $OUT/summary.txt 2>&1
tar czf $OUT/stacks.tgz -C $OUT stacks && rm -rf $OUT/stacks
grep -E "sampled|first step|exit" $OUT/llama.log
