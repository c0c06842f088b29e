# Sourced by scripts/isa_rerun.sh and bench/isa_variants.sh: the kernel variants' order
# (design.md §10; core/cpu.hpp's Isa) and this CPU's best one as the build's `longseq info` says.
#   isa_level NAME     0 portable, 1 avx2, 2 avx512, 3 avx512_bf16; -1 for any other name
#   isa_best BUILD_DIR the best variant for this CPU (LONGSEQ_ISA ignored); fails naming the tool
isa_level() {
  case $1 in portable) echo 0 ;; avx2) echo 1 ;; avx512) echo 2 ;; avx512_bf16) echo 3 ;; *) echo -1 ;; esac
}
isa_best() {
  local best
  best=$(LONGSEQ_ISA='' "$1/cli/longseq" info | sed -n 's/.*best for this CPU: \([a-z0-9_]*\).*/\1/p')
  [ -n "$best" ] || { echo "[isa] could not read the best variant from $1/cli/longseq info" >&2; return 1; }
  echo "$best"
}
