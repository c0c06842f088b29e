#!/usr/bin/env bash
# kernels.isa_symbols: every object of a kernel variant (kernels/cpu/isa/, compiled with that
# variant's -m flags) may define code only inside its own namespace longseq::kernels::cpu::isa_<v>.
# An inline function or template instantiated there under any other name (a std:: helper, a
# core:: inline, core::cat for an error message) is a weak symbol the linker may keep for the whole
# program: an AVX-512 copy kept for everyone faults on an AVX2 CPU, at random, depending on link
# order. Data symbols (V, R, D, B: constants, the personality reference) carry no instructions,
# nor does clang's __clang_call_terminate (__cxa_begin_catch, then std::terminate).
# Usage: isa_symbols.sh VARIANT OBJECT... (CMake passes $<TARGET_OBJECTS> as one ;-list).
set -euo pipefail
variant=$1
shift
objs=()
for a in "$@"; do
  IFS=';' read -r -a parts <<< "$a"
  objs+=("${parts[@]}")
done
[ ${#objs[@]} -gt 0 ] || { echo "[kernels.isa_symbols] no objects given"; exit 1; }
bad=$(nm -C --defined-only "${objs[@]}" | awk '$2 ~ /^[TWiu]$/' | grep -v "longseq::kernels::cpu::isa_${variant}::" |
  grep -v ' W __clang_call_terminate$' || true)
if [ -n "$bad" ]; then
  echo "[kernels.isa_symbols] variant ${variant} defines code outside its namespace:"
  echo "$bad"
  exit 1
fi
echo "[kernels.isa_symbols] variant ${variant}: ${#objs[@]} objects, every code symbol inside isa_${variant}"
