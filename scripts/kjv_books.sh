#!/usr/bin/env bash
# Builds a token file of many documents for --mask document training: the 66 books of the King
# James Bible (public domain) from Debian's bible-kjv package (`bible`, data in bible-kjv-text),
# one document per book, byte-level tokens with an end-of-text (id 256) after each book.
#   usage: scripts/kjv_books.sh [OUT.tok]     (default build/kjv-books.tok; about 4.4M tokens)
# Needs the longseq binary (build/cli/longseq, or LONGSEQ=path). The books keep the program's
# layout: "Genesis 1" chapter headings and numbered verses.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/kjv-books.tok}
LONGSEQ=${LONGSEQ:-build/cli/longseq}
command -v bible >/dev/null || { echo "[kjv_books] needs Debian's bible-kjv (scripts/setup.sh installs it)" >&2; exit 1; }
[ -x "$LONGSEQ" ] || { echo "[kjv_books] no $LONGSEQ: build first (scripts/build.sh)" >&2; exit 1; }
BOOKS="Gen Exo Lev Num Deu Jos Jdg Rut 1Sa 2Sa 1Ki 2Ki 1Ch 2Ch Ezr Neh Est Job Psa Pro Ecc Son Isa
Jer Lam Eze Dan Hos Joe Amo Oba Jon Mic Nah Hab Zep Hag Zec Mal Mat Mar Luk Joh Act Rom 1Co 2Co Gal
Eph Phi Col 1Th 2Th 1Ti 2Ti Tit Phm Heb Jam 1Pe 2Pe 1Jo 2Jo 3Jo Jude Rev"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
i=0
for b in $BOOKS; do
  i=$((i + 1))
  f=$(printf '%s/%02d-%s.txt' "$tmp" "$i" "$b")
  # Chapter 999 verse 999 clamps to the book's last verse; the leading blank line is dropped.
  bible "${b}1:1-999:999" 2>/dev/null | sed '1{/^$/d}' >"$f"
  [ -s "$f" ] || { echo "[kjv_books] bible printed nothing for $b" >&2; exit 1; }
  files+=("$f")
done
[ "${#files[@]}" -eq 66 ] || { echo "[kjv_books] expected 66 books, got ${#files[@]}" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
"$LONGSEQ" tokenize --in "${files[@]}" --out "$OUT"
