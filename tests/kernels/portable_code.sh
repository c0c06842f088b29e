#!/usr/bin/env bash
# kernels.portable_code: the longseq binary runs on any x86-64 CPU. Outside the kernel variants'
# namespaces (longseq::kernels::cpu::isa_avx2, isa_avx512, isa_avx512_bf16), which run only after
# the CPU reported their ISA, no function may contain an AVX instruction (VEX/EVEX encoded: every
# such mnemonic starts with 'v' in AT&T syntax) or touch ymm/zmm/opmask registers. A
# -march=native, or an AVX-512 copy of an inline function kept by the linker, fails here.
# clang names OpenMP's outlined regions ".omp_outlined." (local symbols without their parent's
# name), so under clang those are not attributed and are skipped: the check is complete under
# GCC (whose "<parent>._omp_fn.N" carries the namespace), the default compiler.
# Usage: portable_code.sh BINARY
set -euo pipefail
bin=$1
command -v objdump >/dev/null || { echo "[kernels.portable_code] SKIPPED: objdump not found"; exit 77; }
objdump -d -C --no-show-raw-insn "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; isa = (fn ~ /::isa_avx(2|512|512_bf16)::/ || fn ~ /<\.omp_outlined\./); next }
  isa { next }
  {
    # "  addr:<TAB>mnemonic operands"
    n = split($0, parts, "\t")
    if (n < 2) next
    split(parts[2], w, " ")
    m = w[1]
    if (m ~ /^v/ && m !~ /^(verr|verw)$/ || $0 ~ /%[yz]mm|%k[0-7]/) {
      if (!(fn in seen)) { seen[fn] = 1; nbad++; if (nbad <= 20) print "  " fn "  " m }
    }
  }
  END {
    if (nbad > 0) { print "[kernels.portable_code] " nbad " functions outside the kernel variants use AVX"; exit 1 }
  }'
echo "[kernels.portable_code] $(basename "$bin"): no AVX instruction outside the kernel variants"
