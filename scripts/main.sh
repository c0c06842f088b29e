#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, then train a small LLaMA
# (4 layers, hidden 256, byte-level vocabulary) on 32K-token sequences of English text with 4
# local ranks: burst attention, zigzag balance, fused LM head + loss, sequence-level selective
# checkpointing and ZeRO-3. Metrics and the checkpoint land in runs/main/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/cli/longseq train --preset main --out runs/main "$@"
