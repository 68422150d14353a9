# Shared by the session command scripts under benchmarks/results/ (from session 34 on):
# source it, then call zoo_rows once per group of rows and zoo_summary once at the end.
#   zoo_rows NAME MODELS STRATEGIES ROW_TIMEOUT BUDGET_SECONDS [extra zoo.py args]
# runs benchmarks/zoo.py over 8 steps (1 warm-up, warm caches) into $OUT/zoo_NAME, its
# output in $OUT/zoo_NAME.log, under a hard cap of BUDGET_SECONDS + ROW_TIMEOUT + 20 s.
# zoo_summary writes the measurement and re-plan log lines ($OUT/replans.txt), each
# row's back-to-back, synced and per-step times, host issue time and collections
# ($OUT/synced.txt), packs the rows' folders into $OUT/zoo.tgz and prints a short
# summary last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
ZOO_GROUPS=()

zoo_rows() {
  local name=$1 models=$2 strategies=$3 row=$4 budget=$5
  shift 5
  ZOO_GROUPS+=("$name")
  timeout $((budget + row + 20)) python benchmarks/zoo.py --models "$models" --strategies "$strategies" \
    --steps 8 --warmup 1 --timeout "$row" --budget-seconds "$budget" --caches warm \
    --out "$OUT/zoo_$name" "$@" > "$OUT/zoo_$name.log" 2>&1
}

zoo_summary() {
  local name dirs=()
  for name in "${ZOO_GROUPS[@]}"; do dirs+=("zoo_$name"); done
  grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again|short|over memory_limit' \
    "$OUT"/zoo_*/*/*.log 2>/dev/null | cut -c1-1200 > "$OUT/replans.txt"
  python - <<'PY' > "$OUT/synced.txt" 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_*/*/compare.json")):
    for r in json.load(open(f))["rows"]:
        e = r["extra"]
        print(f.split("/")[-2], r["strategy"], r["step_ms"], e.get("synced_step_ms"), e.get("step_times_ms"),
              "host", e.get("host_step_ms"), "gc", e.get("gc"))
PY
  tar czf "$OUT/zoo.tgz" -C "$OUT" "${dirs[@]}" && rm -rf "${dirs[@]/#/$OUT/}"
  cut -c1-300 "$OUT/replans.txt"
  for name in "${ZOO_GROUPS[@]}"; do tail -12 "$OUT/zoo_$name.log"; done
  cat "$OUT/synced.txt" "$OUT/gpu.txt"
}

# interleaved_rows NAME MODEL DTYPE STRATEGIES TIMEOUT [extra interleaved.py args]
# runs benchmarks/interleaved.py on benchmarks/zoo_models.py:MODEL into $OUT/NAME.log and
# $OUT/NAME.json, and prints the measurement and re-plan lines and the rows' table.
INTERLEAVED_PAT='offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded \(|not run'
interleaved_rows() {
  local name=$1 model=$2 dtype=$3 strategies=$4 limit=$5
  shift 5
  timeout "$limit" python benchmarks/interleaved.py --model "benchmarks/zoo_models.py:$model" --dtype "$dtype" \
    --strategies "$strategies" --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc $?" >> "$OUT/gpu.txt"
  grep -h -E "$INTERLEAVED_PAT" "$OUT/$name.log" | cut -c1-420
  tail -n 6 "$OUT/$name.log" | head -n 4
}

# gpu_suite LIMIT: the GPU-marked tests on six workers into $OUT/gpu_suite.log, its exit status
# in $OUT/gpu.txt, and its failures and summary printed. Give it 300 s or more: since session 47's
# host-copy tests (copies delayed ~100 ms each) the suite did not end within 200 s (session 48).
gpu_suite() {
  timeout "$1" python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
    > "$OUT/gpu_suite.log" 2>&1
  echo "gpu suite rc $?" >> "$OUT/gpu.txt"
  grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_suite.log" | tail -n 8
}
