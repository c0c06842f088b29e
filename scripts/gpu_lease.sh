#!/usr/bin/env bash
# A GPU lease in one call each (issue "The GPU lease", docs/gpu.md "The next session with a GPU").
# The device tool sends the working tree and the paths named in `carry`, runs one command, and
# brings back only what that command left under $OUT: at most 8 files, 16 MiB each, named in
# letters, digits, '.', '_' and '-'. scripts/gpu_check.sh writes some 25 files, so its results
# have to be packed, and a pass cut at its deadline must still come back packed:
#
#   bash scripts/gpu_lease.sh check
#       here, before the call (no GPU needed): deps/ holds the offline packages and nothing
#       unpacked (a carried deps/prefix would weigh ~130 MiB), what travels fits the tool's
#       64 MiB, and the call to make is printed
#   LONGSEQ_DEPS=deps bash scripts/gpu_lease.sh run [-- COMMAND ...]
#       on the device machine: COMMAND (default: bash scripts/gpu_check.sh "$LEASE_WORK") runs
#       with LEASE_WORK, a scratch folder for its files, under a deadline of GPU_LEASE_S seconds
#       (default 420), its output in LEASE_WORK/command.txt; then LEASE_WORK is packed into $OUT
#       (or LEASE_OUT): summary.txt (the pass's summary, or the tails of its logs when it was
#       cut, and the lease's own lines) and results.tar.gz (every file; a log over
#       GPU_LEASE_FILE_MIB, default 4, is cut to its last part, named in summary.txt). The exit
#       status is COMMAND's (124 when the deadline cut it).
#   bash scripts/gpu_lease.sh pack DIR OUTDIR
#       the packing alone (tests/scripts/gpu_lease_pack.sh checks it in CI)
set -euo pipefail
cd "$(dirname "$0")/.."

# The device tool's limits (/work/.library/device/README.md, "Limits").
readonly MAX_FILE_BYTES=$((16 * 1024 * 1024))
readonly MAX_TREE_BYTES=$((64 * 1024 * 1024))

usage() {
  sed -n '2,21p' "$0" >&2
  exit 2
}

# pack DIR OUTDIR: DIR's files into OUTDIR/summary.txt and OUTDIR/results.tar.gz. Files over the
# per-file cut are replaced, in a copy, by their last part; when the archive still passes the
# tool's 16 MiB the cut halves until it fits (logs are what grows: a test log that repeats one
# failure for every case). Prints nothing; the summary names every file that was cut.
pack() {
  local dir=$1 dest=$2
  [ -d "$dir" ] || { echo "[gpu_lease] pack: $dir is not a folder" >&2; return 1; }
  mkdir -p "$dest"
  local cut=$((${GPU_LEASE_FILE_MIB:-4} * 1024 * 1024))
  local stage
  stage=$(mktemp -d)
  while :; do
    rm -rf "${stage:?}"/*
    mkdir -p "$stage/results"
    (cd "$dir" && find . -type f -print0) | while IFS= read -r -d '' f; do
      mkdir -p "$stage/results/$(dirname "$f")"
      local size
      size=$(stat -c %s "$dir/$f")
      if [ "$size" -gt "$cut" ]; then
        {
          echo "[gpu_lease] ${f#./}: $size bytes, cut to its last $cut"
          tail -c "$cut" "$dir/$f"
        } > "$stage/results/$f"
        echo "${f#./} ($size bytes, last $cut kept)" >> "$stage/cut.txt"
      else
        cp "$dir/$f" "$stage/results/$f"
      fi
    done
    tar -czf "$stage/results.tar.gz" -C "$stage" results
    if [ "$(stat -c %s "$stage/results.tar.gz")" -le "$MAX_FILE_BYTES" ] || [ "$cut" -le 65536 ]; then
      break
    fi
    cut=$((cut / 2))
  done
  {
    if [ -f "$dir/summary.txt" ]; then
      cat "$dir/summary.txt"
    else
      # The pass was cut before it wrote its summary: the tails of what it did write.
      echo "[gpu_lease] no summary.txt (the pass was cut or failed early); the tails of its logs:"
      (cd "$dir" && find . -maxdepth 1 -type f -name '*.txt' ! -name lease.txt | sort) |
        while read -r f; do
          echo "--- ${f#./}"
          tail -n 8 "$dir/$f"
        done
    fi
    [ ! -f "$stage/cut.txt" ] || sed 's/^/[gpu_lease] cut: /' "$stage/cut.txt"
    echo "[gpu_lease] $(cd "$dir" && find . -type f | wc -l) files in results.tar.gz" \
      "($(stat -c %s "$stage/results.tar.gz") bytes)"
  } > "$stage/summary.txt"
  if [ "$(stat -c %s "$stage/results.tar.gz")" -gt "$MAX_FILE_BYTES" ]; then
    # Only a folder of thousands of files could get here; the summary still comes back.
    echo "[gpu_lease] results.tar.gz is over 16 MiB even with every file cut to 64 KiB: left out" \
      >> "$stage/summary.txt"
    rm -f "$stage/results.tar.gz"
  fi
  mv "$stage/summary.txt" "$dest/summary.txt"
  [ -f "$stage/results.tar.gz" ] && mv "$stage/results.tar.gz" "$dest/results.tar.gz"
  rm -rf "$stage"
}

# What the device tool sends: tracked files, untracked files git does not ignore, and the carried
# paths (here deps/), in bytes.
travelling_bytes() {
  local tree=0 carried=0
  tree=$(git ls-files -z --cached --others --exclude-standard |
    xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  [ -d deps ] && carried=$(du -sb deps | cut -f1)
  echo $((tree + carried))
}

check() {
  local ok=1
  if [ ! -d deps ] || ! compgen -G 'deps/*.deb' > /dev/null; then
    echo "[gpu_lease] deps/ has no .deb files: run  bash scripts/offline_deps.sh fetch deps" >&2
    ok=0
  fi
  if [ -d deps/prefix ]; then
    echo "[gpu_lease] deps/prefix exists (a build here unpacked into it): it would travel;" \
      "remove it (rm -rf deps/prefix) or build here from a copy of deps/" >&2
    ok=0
  fi
  local bytes
  bytes=$(travelling_bytes)
  echo "[gpu_lease] what travels: $((bytes / 1024 / 1024)) MiB of the tool's 64 (tree and deps/)"
  if [ "$bytes" -gt "$MAX_TREE_BYTES" ]; then
    echo "[gpu_lease] over the device tool's 64 MiB: the call would be refused" >&2
    ok=0
  fi
  [ "$ok" = 1 ] || exit 1
  cat << 'EOF'
[gpu_lease] ready. The first call (docs/gpu.md "The next session with a GPU", item 1):
  run  command:   LONGSEQ_DEPS=deps GPU_CHECK_TRAIN=0 bash scripts/gpu_lease.sh run
       carry:     ["deps"]
       timeout_s: 540
EOF
}

run() {
  local dest=${LEASE_OUT:-${OUT:-}}
  [ -n "$dest" ] || { echo "[gpu_lease] run: neither OUT (the device tool's) nor LEASE_OUT is set" >&2; exit 2; }
  local deadline=${GPU_LEASE_S:-420}
  [[ "$deadline" =~ ^[1-9][0-9]*$ ]] ||
    { echo "[gpu_lease] GPU_LEASE_S must be a whole number of seconds, got '$deadline'" >&2; exit 2; }
  LEASE_WORK=${LEASE_WORK:-$(mktemp -d /tmp/gpu_lease.XXXXXX)}
  mkdir -p "$LEASE_WORK"
  export LEASE_WORK
  local cmd=(bash scripts/gpu_check.sh "$LEASE_WORK")
  [ $# -gt 0 ] && cmd=("$@")
  local t0 rc=0
  t0=$(date +%s)
  echo "[gpu_lease] $(date -u +%Y-%m-%dT%H:%M:%SZ) running, deadline ${deadline} s: ${cmd[*]}"
  # timeout signals its whole process group, so the deadline stops the pass's builds, tests and
  # benchmarks too, not only its shell.
  timeout --signal=TERM --kill-after=15 "$deadline" "${cmd[@]}" \
    > "$LEASE_WORK/command.txt" 2>&1 || rc=$?
  local secs=$(($(date +%s) - t0))
  local how="exit status $rc"
  [ "$rc" -eq 124 ] && how="cut at the deadline of ${deadline} s (exit status 124)"
  local line="[gpu_lease] ${cmd[*]}: $how after $secs s"
  echo "$line" >> "$LEASE_WORK/lease.txt"
  pack "$LEASE_WORK" "$dest"
  echo "$line" >> "$dest/summary.txt"
  cat "$dest/summary.txt"
  tail -n 20 "$LEASE_WORK/command.txt"
  return "$rc"
}

[ $# -ge 1 ] || usage
verb=$1
shift
case "$verb" in
  check)
    [ $# -eq 0 ] || usage
    check
    ;;
  run)
    if [ $# -gt 0 ]; then
      [ "$1" = "--" ] || usage
      shift
    fi
    run "$@"
    ;;
  pack)
    [ $# -eq 2 ] || usage
    pack "$1" "$2"
    ;;
  *) usage ;;
esac
