# Sourced by scripts/ci_fuzz.sh and scripts/ci_sanitize.sh: configures $BUILD_DIR (default
# build-asan) with Debian's clang, -fsanitize=address,undefined (LONGSEQ_SANITIZE) and the libFuzzer
# coverage instrumentation (LONGSEQ_FUZZ), at -O1 with line tables (fast to compile, readable
# stacks; -Wno-pass-failed: at -O1 clang reports "#pragma omp simd" loops it did not vectorize,
# which -Werror would turn into errors). One build serves both scripts: the fuzz_* harnesses and
# the test executables. The test executables' and the longseq binary's own sources (they drive
# the libraries; the code under test is in the libraries) compile at -O0 without the fuzzer's
# coverage instrumentation: a third of the compile time (docs/reliability.md "Cost in CI").
asan_configure() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only -DNDEBUG -Wno-pass-failed" \
      -DLONGSEQ_SANITIZE=address,undefined -DLONGSEQ_FUZZ=ON -DLONGSEQ_BUILD_BENCH=OFF \
      "-DLONGSEQ_TEST_FLAGS=-O0;-fno-sanitize=fuzzer-no-link" \
      "-DLONGSEQ_CLI_FLAGS=-O0;-fno-sanitize=fuzzer-no-link" >/dev/null
  fi
}
