#!/usr/bin/env bash
# The CLI contracts under mpirun against the local backend (issue 14):
#   cli_mpirun.sh LONGSEQ DATA_FILE NP WORKDIR
# For each algorithm that suits NP ranks, `mpirun -np NP longseq attention` writes o, lse, dq, dk,
# dv .npy byte-identical to `longseq attention --backend local --world NP` on the same seeded
# inputs (odd lengths), stats.json lists every rank once, the summary is printed once; a bad flag
# ends every process non-zero; `train` for 2 steps under mpirun gives the local backend's losses.
# Exits non-zero naming each broken contract.
set -uo pipefail
LONGSEQ=$1 DATA=$2 NP=$3 WORK=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$WORK" && mkdir -p "$WORK"
MPIRUN=(mpirun --oversubscribe -np "$NP")
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Cases per world: "N,Hq,Hkv,D algo [extra flags]". Odd lengths pad; heads suit Ulysses's split.
case $NP in
  2) cases=("1000,12,6,8 ring" "1000,12,6,8 burst" "777,12,6,8 ulysses" "777,12,6,8 usp:2"
            "1000,12,6,8 burst --nodes 2") ;;
  3) cases=("777,12,6,8 ring" "1000,12,6,8 burst" "777,12,6,8 ulysses --balance contiguous") ;;
  4) cases=("1000,12,4,8 ring --balance striped" "777,12,4,8 burst" "1000,12,4,8 double-ring --nodes 2"
            "777,12,4,8 startrail:2" "1000,12,4,8 ulysses" "777,12,4,8 usp:2 --scale 0.5") ;;
  *) echo "no cases for -np $NP"; exit 2 ;;
esac

i=0
for c in "${cases[@]}"; do
  read -r dims algo extra <<<"$c"
  i=$((i + 1))
  args=(attention --random "$dims" --seed "$i" --mask causal --algo "$algo" $extra)
  loc="$WORK/a$i.local" mpi="$WORK/a$i.mpi"
  if ! "$LONGSEQ" "${args[@]}" --backend local --world "$NP" --out "$loc" >"$loc.log" 2>&1; then
    fail "local ${args[*]}: $(tail -3 "$loc.log")"
    continue
  fi
  if ! "${MPIRUN[@]}" "$LONGSEQ" "${args[@]}" --out "$mpi" >"$mpi.log" 2>&1; then
    fail "mpirun -np $NP ${args[*]}: $(tail -3 "$mpi.log")"
    continue
  fi
  for f in o lse dq dk dv; do
    cmp -s "$loc/$f.npy" "$mpi/$f.npy" || fail "mpirun -np $NP ${args[*]}: $f.npy differs from the local backend's"
  done
  summaries=$(grep -c "attention (f32)" "$mpi.log")
  [ "$summaries" = 1 ] || fail "mpirun -np $NP ${args[*]}: summary printed $summaries times"
  ranks=$(grep -o '"rank": [0-9]*' "$mpi/stats.json" | sort -u | wc -l)
  [ "$ranks" = "$NP" ] || fail "mpirun -np $NP ${args[*]}: stats.json holds $ranks distinct ranks"
  # Same traffic on both backends, per rank (the byte counters are part of the contract).
  for key in bytes_sent_intra bytes_sent_inter; do
    a=$(grep "\"$key\"" "$loc/stats.json" | tr -d ' ,') b=$(grep "\"$key\"" "$mpi/stats.json" | tr -d ' ,')
    [ "$a" = "$b" ] || fail "mpirun -np $NP ${args[*]}: $key differs: local [$a] mpi [$b]"
  done
done

# A bad flag: every process ends non-zero (each process reports its own status to a file).
cat >"$WORK/status.sh" <<'EOF'
#!/usr/bin/env bash
"$@"
rc=$?
echo "$rc" >"$STATUS_DIR/rank$OMPI_COMM_WORLD_RANK"
exit $rc
EOF
chmod +x "$WORK/status.sh"
mkdir -p "$WORK/status"
STATUS_DIR="$WORK/status" "${MPIRUN[@]}" -x STATUS_DIR "$WORK/status.sh" "$LONGSEQ" attention --random 100,2,2,8 \
  --world $((NP + 1)) >"$WORK/bad.log" 2>&1 && fail "mpirun -np $NP attention --world $((NP + 1)) exited 0"
grep -q -- "--world $((NP + 1)) but mpirun started $NP" "$WORK/bad.log" ||
  fail "mpirun -np $NP attention --world $((NP + 1)): no message naming the world: $(tail -3 "$WORK/bad.log")"
for ((r = 0; r < NP; ++r)); do
  # A process killed by MPI_Abort writes no status: that is non-zero too.
  s=$(cat "$WORK/status/rank$r" 2>/dev/null || echo killed)
  [ "$s" != 0 ] || fail "mpirun -np $NP attention --world $((NP + 1)): rank $r exited 0"
done

# Flag ranges (local backend, once): refused with a message naming the value, never a crash.
if [ "$NP" = 2 ]; then
  # A float32 .npy of shape (5, 0, 4): 10-byte preamble + header padded to 64 bytes, no data.
  npy() {
    local h="{'descr': '<f4', 'fortran_order': False, 'shape': $1, }"
    while [ $(((10 + ${#h} + 1) % 64)) != 0 ]; do h="$h "; done
    { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((${#h} + 1)))\\x00"; printf '%s\n' "$h"; } >"$2"
  }
  npy "(5, 0, 4)" "$WORK/zero_heads.npy"
  npy "(0, 2, 4)" "$WORK/zero_len.npy"
  bad=("attention --random 100,2,2,8 --world 0|--world 0 must be >= 1"
       "attention --random 100,2,2,8 --world -3|--world -3 must be >= 1"
       "attention --random 100,2,2,8 --nodes 0|--nodes 0 must be >= 1"
       "attention --random 100,6,4,8|query heads 6 must be a multiple of key/value heads 4"
       "attention --random 100,0,2,8|--random needs N,Hq,Hkv,D (positive integers)"
       "attention --q $WORK/zero_heads.npy --k $WORK/zero_heads.npy --v $WORK/zero_heads.npy|--q has shape [5, 0, 4]"
       "attention --q $WORK/zero_len.npy --k $WORK/zero_len.npy --v $WORK/zero_len.npy|--q has shape [0, 2, 4]"
       "attention --random 100,4,2,8 --world 4 --nodes 3|--nodes 3 must divide the world of 4")
  for b in "${bad[@]}"; do
    cmd=${b%%|*} want=${b#*|}
    # shellcheck disable=SC2086
    "$LONGSEQ" $cmd --backend local >"$WORK/flag.log" 2>&1
    rc=$?
    [ "$rc" = 1 ] || fail "longseq $cmd: exit $rc (want 1): $(tail -2 "$WORK/flag.log")"
    grep "error: " "$WORK/flag.log" | grep -qF -- "$want" || fail "longseq $cmd: no error naming '$want': $(tail -2 "$WORK/flag.log")"
  done
fi

# Commands without communication run on rank 0 only: the same stdout and files as without mpirun.
if [ "$NP" = 3 ]; then
  "$LONGSEQ" schedule --algo ring --world 4 >"$WORK/sched.local" 2>&1
  "${MPIRUN[@]}" "$LONGSEQ" schedule --algo ring --world 4 >"$WORK/sched.mpi" 2>&1 ||
    fail "mpirun -np $NP schedule: $(tail -2 "$WORK/sched.mpi")"
  cmp -s "$WORK/sched.local" "$WORK/sched.mpi" || fail "mpirun -np $NP schedule: output differs from a plain run (printed more than once?)"
  "$LONGSEQ" tokenize --in "$DATA" --out "$WORK/tok.local" >"$WORK/tok.local.log" 2>&1
  "${MPIRUN[@]}" "$LONGSEQ" tokenize --in "$DATA" --out "$WORK/tok.mpi" >"$WORK/tok.mpi.log" 2>&1 ||
    fail "mpirun -np $NP tokenize: $(tail -2 "$WORK/tok.mpi.log")"
  cmp -s "$WORK/tok.local" "$WORK/tok.mpi" || fail "mpirun -np $NP tokenize: token file differs from a plain run's"
  [ "$(grep -c tokens "$WORK/tok.mpi.log")" = 1 ] || fail "mpirun -np $NP tokenize: summary not printed exactly once"
  pargs=(plan --model llama-7b --seq 1M --gpus 32 --gpus-per-node 8 --hardware a800 --top 5)
  "$LONGSEQ" "${pargs[@]}" >"$WORK/plan.local" 2>&1
  "${MPIRUN[@]}" "$LONGSEQ" "${pargs[@]}" >"$WORK/plan.mpi" 2>&1 || fail "mpirun -np $NP plan: $(tail -2 "$WORK/plan.mpi")"
  cmp -s "$WORK/plan.local" "$WORK/plan.mpi" || fail "mpirun -np $NP plan: output differs from a plain run (printed more than once?)"
  # calibrate measures on every process (the MPI link needs two) and one writes the profile.
  "${MPIRUN[@]}" "$LONGSEQ" calibrate --out "$WORK/cal.json" >"$WORK/cal.log" 2>&1 || fail "mpirun -np $NP calibrate: $(tail -2 "$WORK/cal.log")"
  [ "$(grep -c "^wrote " "$WORK/cal.log")" = 1 ] || fail "mpirun -np $NP calibrate: 'wrote' not printed exactly once"
  grep -q '"mpi"' "$WORK/cal.json" 2>/dev/null || fail "mpirun -np $NP calibrate: $WORK/cal.json has no mpi link"
  # eval, generate and passkey: the distributed engine under mpirun, one writer, the local
  # backend's results (each process used to write eval.json / passkey.json from its own ranks).
  "$LONGSEQ" train --preset tiny --data "$DATA" --quiet --steps 2 --seq 61 --out "$WORK/ck" >"$WORK/ck.log" 2>&1 ||
    fail "train for the eval checkpoint: $(tail -2 "$WORK/ck.log")"
  for m in local mpi; do
    run=("$LONGSEQ")
    [ $m = mpi ] && run=("${MPIRUN[@]}" "$LONGSEQ")
    # --sequences 24: the whole file is 6,200 sequences of 61 tokens (9 to 12 s a run, 45 of the
    # test's 59 s on a 2-core Xeon); 24 (8 per rank) reach every rank's part just as well.
    "${run[@]}" eval --checkpoint-dir "$WORK/ck" --data "$DATA" --seq 61 --sequences 24 --world 3 --algo ring --balance zigzag \
      --out "$WORK/ev_$m" >"$WORK/ev_$m.log" 2>&1 || fail "$m eval: $(tail -2 "$WORK/ev_$m.log")"
    "${run[@]}" generate --checkpoint-dir "$WORK/ck" --prompt 'And God said' --max-new-tokens 6 --world 3 \
      --algo burst --json >"$WORK/gen_$m.log" 2>&1 || fail "$m generate: $(tail -2 "$WORK/gen_$m.log")"
    "${run[@]}" passkey --checkpoint-dir "$WORK/ck" --lengths 128 --depths 0,1 --trials 1 --world 3 \
      --out "$WORK/pk_$m" >"$WORK/pk_$m.log" 2>&1 || fail "$m passkey: $(tail -2 "$WORK/pk_$m.log")"
  done
  cmp -s "$WORK/ev_local/eval.json" "$WORK/ev_mpi/eval.json" || fail "mpirun -np $NP eval: eval.json differs from the local backend's"
  # Without --world under mpirun the world is mpirun's -np (the --world row's promise): the same
  # eval as --world 3 above.
  "${MPIRUN[@]}" "$LONGSEQ" eval --checkpoint-dir "$WORK/ck" --data "$DATA" --seq 61 --sequences 24 --algo ring \
    --balance zigzag --out "$WORK/ev_np" >"$WORK/ev_np.log" 2>&1 || fail "mpirun eval without --world: $(tail -2 "$WORK/ev_np.log")"
  cmp -s "$WORK/ev_mpi/eval.json" "$WORK/ev_np/eval.json" || fail "mpirun -np $NP eval without --world: eval.json differs from --world $NP"
  cmp -s "$WORK/gen_local.log" "$WORK/gen_mpi.log" || fail "mpirun -np $NP generate --json: output differs from the local backend's"
  cmp -s "$WORK/pk_local/passkey.json" "$WORK/pk_mpi/passkey.json" || fail "mpirun -np $NP passkey: passkey.json differs from the local backend's"
  # --backend local under mpirun: every process runs the same threads; one prints and writes.
  "${MPIRUN[@]}" "$LONGSEQ" attention --random 100,2,2,8 --world 2 --backend local --out "$WORK/lo" >"$WORK/lo.log" 2>&1 ||
    fail "mpirun -np $NP attention --backend local: $(tail -2 "$WORK/lo.log")"
  [ "$(grep -c "attention (f32)" "$WORK/lo.log")" = 1 ] || fail "mpirun -np $NP attention --backend local: summary not printed once"
fi

# train: 2 steps under mpirun, same losses as the local backend, for the algorithms that suit NP
# ranks with the tiny preset's 4 query and 2 key/value heads, at odd lengths.
case $NP in
  2) tcases=("61 ring" "61 burst" "53 ulysses") ;;
  3) tcases=("61 ring" "47 burst --balance striped") ;;
  4) tcases=("61 burst" "61 double-ring:2" "59 startrail:2" "53 usp:2" "61 double-ring:2:ring") ;;
esac
j=0
for c in "${tcases[@]}"; do
  read -r seq algo extra <<<"$c"
  j=$((j + 1))
  targs=(train --preset tiny --data "$DATA" --quiet --steps 2 --seq "$seq" --world "$NP" --algo "$algo" $extra)
  tl="$WORK/t$j.local" tm="$WORK/t$j.mpi"
  if ! "$LONGSEQ" "${targs[@]}" --out "$tl" >"$tl.log" 2>&1; then
    fail "local ${targs[*]}: $(tail -3 "$tl.log")"
    continue
  fi
  if ! "${MPIRUN[@]}" "$LONGSEQ" "${targs[@]}" --out "$tm" >"$tm.log" 2>&1; then
    fail "mpirun -np $NP ${targs[*]}: $(tail -3 "$tm.log")"
    continue
  fi
  la=$(grep -o '"loss": *[-0-9.e+]*' "$tl/metrics.json" | awk '{print $2}' | tr '\n' ' ')
  lb=$(grep -o '"loss": *[-0-9.e+]*' "$tm/metrics.json" | awk '{print $2}' | tr '\n' ' ')
  ok=$(awk -v a="$la" -v b="$lb" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ");
         if (n != 2 || m != 2) { print 0; exit }
         for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) { print 0; exit } }
         print 1 }')
  [ "$ok" = 1 ] || fail "mpirun -np $NP ${targs[*]}: losses [$lb], local backend [$la]"
done

if [ "$failures" -gt 0 ]; then
  echo "$failures contract(s) broken under mpirun -np $NP"
  exit 1
fi
echo "mpirun -np $NP: ${#cases[@]} attention cases byte-identical to the local backend, bad flag non-zero everywhere, ${#tcases[@]} train cases with the local backend's losses"
