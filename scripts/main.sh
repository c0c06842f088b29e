#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, then train a small LLaMA
# (4 layers, hidden 256, byte-level vocabulary) on 32K-token sequences of English text with 4
# local ranks: burst attention, zigzag balance, fused LM head + loss, sequence-level selective
# checkpointing and ZeRO-3. Metrics and the checkpoint land in runs/main/.
#
# Only the `longseq` binary is built: the main job runs nothing else, and the test binaries and
# benchmarks are over half of a full build (`scripts/test.sh` builds them all in the same build/).
# Each phase prints its wall time, so the time to the first step can be read off the log
# (README "Two commands").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
phase bash scripts/setup.sh
BUILD_TARGETS=longseq phase bash scripts/build.sh
echo "[main.sh] training from $(($(date +%s) - T_START)) s"
exec ./build/cli/longseq train --preset main --out runs/main "$@"
