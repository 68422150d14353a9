#!/usr/bin/env bash
# Session 31 (issue 18), command 3: the transfer ops with the stream switches made
# directly and the compute point followed through a reused event (streams.enter / leave /
# follow): their host time again (2026-11-27_s31_op_host.py), the GPU suite (its race
# tests delay the copy streams: a missing wait shows as a wrong result), then the zoo's
# ViT-B/16 rows inductor, offload:auto and offload:0.5.
#   OUT=dir bash benchmarks/results/2026-11-27_s31_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
git log -1 --format=%h >> $OUT/gpu.txt 2>/dev/null
timeout 60 python benchmarks/results/2026-11-27_s31_op_host.py > $OUT/op_host.log 2>&1
timeout 230 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
timeout 270 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto,offload:0.5 --steps 3 \
  --warmup 1 --timeout 110 --budget-seconds 250 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_vit/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_vit && rm -rf $OUT/zoo_vit
tail -30 $OUT/op_host.log
tail -4 $OUT/suite.log | cut -c1-300
cut -c1-500 $OUT/replans.txt; tail -12 $OUT/zoo_vit.log; cat $OUT/gpu.txt
