#!/usr/bin/env bash
# Fails when a C++ file differs from .clang-format: clang-format --dry-run --Werror over the files
# listed in tests/format_checked.txt (one path a line, relative to the repository; # comments), or
# with --all over every *.cpp / *.hpp under src/ cli/ tests/ bench/. CTest runs it as `format`.
# The list grows as files are formatted; once the whole tree is, the test switches to --all.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null || { echo "[format] $CLANG_FORMAT not found (scripts/setup.sh installs it)" >&2; exit 1; }
files=()
if [ "${1:-}" = "--all" ]; then
  while IFS= read -r f; do files+=("$f"); done < <(find src cli tests bench -name '*.cpp' -o -name '*.hpp' | sort)
else
  list=tests/format_checked.txt
  while IFS= read -r line; do
    f=${line%%#*}
    f=$(echo "$f" | xargs)
    [ -z "$f" ] && continue
    [ -f "$f" ] || { echo "[format] $list names $f, which does not exist" >&2; exit 1; }
    files+=("$f")
  done < "$list"
fi
[ ${#files[@]} -gt 0 ] || { echo "[format] no files to check" >&2; exit 1; }
if ! "$CLANG_FORMAT" --dry-run --Werror "${files[@]}"; then
  echo "[format] the files above differ from .clang-format: run clang-format -i on them" >&2
  exit 1
fi
echo "[format] ${#files[@]} files match .clang-format"
