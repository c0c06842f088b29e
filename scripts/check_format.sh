#!/usr/bin/env bash
# Fails when a C++ file differs from .clang-format: clang-format --dry-run --Werror over every
# *.cpp / *.hpp under src/ cli/ python/ tests/ bench/ examples/ (or over the files given as arguments).
# CTest runs it as `format`; `clang-format -i FILE` fixes what it names.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
# Exit 77 = skipped (CTest's SKIP_RETURN_CODE for `format`): a missing tool is not a failure of
# the code. CI installs it (scripts/setup.sh), so CI always checks.
command -v "$CLANG_FORMAT" >/dev/null || { echo "[format] SKIPPED: $CLANG_FORMAT not found (scripts/setup.sh installs it)" >&2; exit 77; }
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  while IFS= read -r f; do files+=("$f"); done < <(find src cli python tests bench examples \( -name '*.cpp' -o -name '*.hpp' \) | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "[format] no files to check" >&2; exit 1; }
if ! "$CLANG_FORMAT" --dry-run --Werror "${files[@]}"; then
  echo "[format] the files above differ from .clang-format: run clang-format -i on them" >&2
  exit 1
fi
echo "[format] ${#files[@]} files match .clang-format"
