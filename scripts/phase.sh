# Sourced by scripts/main.sh and scripts/test.sh: `phase CMD...` runs CMD and prints its wall time
# and the time since the script started, so that a log shows where the minutes went (CI's budget,
# a fresh clone's time to its first training step).
T_START=$(date +%s)
phase() {
  local t0
  t0=$(date +%s)
  "$@"
  echo "[$(basename "$0")] $* : $(($(date +%s) - t0)) s (total $(($(date +%s) - T_START)) s)"
}
