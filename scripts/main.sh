#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, then run distributed attention
# forward + backward on a 32K-token sequence over 4 local ranks (burst attention, zigzag balance,
# causal mask). Outputs land in runs/main/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/cli/longseq attention --random 32768,8,8,128 --world 4 --algo burst --balance zigzag \
  --mask causal --threads 1 --out runs/main "$@"
