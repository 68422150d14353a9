#!/usr/bin/env bash
# Session 35 (issue 18), command 2: the transfer ops' effect on the host's kernel launches
# (2026-11-27_s35_host_probe.py), the zoo's vit rows inductor and offload:0.65 (SAC's
# activation memory, about 4.0 GiB, at a fixed budget), then the GPU suite.
#   OUT=dir bash benchmarks/results/2026-11-27_s35_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 120 python benchmarks/results/2026-11-27_s35_host_probe.py > "$OUT/host_probe.log" 2>&1
zoo_rows vit vit inductor,offload:0.65 120 150
timeout 280 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > "$OUT/suite.log" 2>&1
zoo_summary
tail -5 "$OUT/suite.log"
cat "$OUT/host_probe.log"
