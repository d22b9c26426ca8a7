#!/usr/bin/env bash
# The project speaks of the software only: no words about how its work was organised in the user
# documentation, the benchmark records, the headers, the sources, the tests, the scripts and the build.
#
#   scripts/check_words.sh [--root DIR]   lists every offending line under DIR (default: the repo)
#                                         and exits 1 when there is one
#   scripts/check_words.sh --self-test    builds fixture trees and requires the check to reject each
#                                         offending one and to accept the clean ones, so that the
#                                         check cannot pass silently
#
# Checked: README.md, CONTRIBUTING.md, docs/, py/README.md, benchmarks/results/*.md, include/,
# src/, py/, tests/, scripts/, examples/, benchmarks/ (its sources; of benchmarks/results/ only the
# records above), tools/, mk/, .ci/ and the Makefiles (text files only; CHANGELOG.md, which tells
# the history, and the compressed log archives are not checked). Case-insensitive; the patterns are
# those of the project's before-stop checklist: a session with its number (after a space or a dash)
# or a call with its number, an issue with its number (with or without '#'), a defect with its '#'
# number, and the "pre" + "round" tree.
set -euo pipefail

PATTERN='\bsessions?[- ][0-9]|\bcalls? [0-9]+\b|\bissue #?[0-9]+\b|defect #[0-9]|pre[-]round'
PATHS=(README.md CONTRIBUTING.md docs py/README.md benchmarks/results include src py tests scripts examples
       benchmarks tools mk .ci Makefile Makefile.cuda Makefile.rocm)

files_of() {  # files_of ROOT: the checked files, one per line, relative to ROOT
  local root=$1 p
  for p in "${PATHS[@]}"; do
    [ -e "$root/$p" ] || continue
    if [ -f "$root/$p" ]; then
      echo "$p"
    elif [ "$p" = benchmarks/results ]; then
      (cd "$root" && find "$p" -maxdepth 1 -type f -name '*.md' | sort)
    else
      # benchmarks/results/ is listed on its own above: its archive is history, not a record.
      (cd "$root" && find "$p" \( -name .git -o -name __pycache__ -o -name '*.egg-info' \
         -o -path benchmarks/results \) -prune -o \
         -type f ! -name '*.tar.xz' ! -name '*.png' -print | sort)
    fi
  done
}

check_tree() {  # check_tree ROOT: prints offending lines as path:line:text; status 1 when any
  local root=$1 list
  list=$(files_of "$root")
  [ -n "$list" ] || return 0
  # -I skips binary files; -H names the file even when only one is given.
  if (cd "$root" && tr '\n' '\0' <<<"$list" | xargs -0 grep -n -H -I -i -E "$PATTERN"); then
    return 1
  fi
  return 0
}

self_test() {
  local tmp pass=0 fail=0 name want got
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  # Offending words are assembled at run time so that this file itself stays clean.
  local s="sess""ion" c="ca""ll" i="iss""ue" d="def""ect" r="pre""-""round"
  mk() {  # mk NAME PATH TEXT: a fixture tree holding one file
    mkdir -p "$tmp/$1/$(dirname "$2")"
    printf '%s\n' "$3" >"$tmp/$1/$2"
  }
  mk clean_doc      docs/guide.md            "A send completes when its bytes landed; called 3 times."
  mk clean_words    README.md                "The $s layer and the ${c}er; an $i tracker; recalls 5."
  mk clean_log      CHANGELOG.md             "Measured in $s 3."
  mk clean_archive  benchmarks/results/archive/old.md "$c 4 (archived, not a record)"
  mk bad_session    docs/guide.md            "Measured in $s 12 on two GPUs."
  mk bad_sessions   benchmarks/results/x.md  "${s^}s 3 to 5"
  mk bad_call       benchmarks/results/x.md  "## ${c^} 7 (tree abc)"
  mk bad_calls      src/transport/x.cpp      "// ${c}s 3-4 measured this"
  mk bad_issue      include/peerlink/x.h     "// $i 14's target"
  mk bad_issue_hash tests/unit/x_test.cpp    "// regression test for $i #12"
  mk bad_defect     py/peerlink/x.py         "# ${d^} #2: close() while waiting"
  mk bad_preround   scripts/x.sh             "# the $r tree"
  mk bad_pyreadme   py/README.md             "${s^} 9 added this."
  mk bad_example    examples/x.py            "# $c 2"
  mk bad_session_dash tests/x_test.cpp       "// the $s-22 reproduction"
  mk bad_bench      benchmarks/common/x.h    "// stalled in $s 7 $c 8"
  mk bad_tools      tools/x.cpp              "// $i 11.3"
  mk bad_mk         mk/x.mk                  "# layering rule ($i 11.2)"
  mk bad_makefile   Makefile                 "# $c 3"
  mk bad_ci         .ci/run                  "# $d #4"
  for t in "$tmp"/*/; do
    name=$(basename "$t")
    case $name in clean_*) want=pass ;; *) want=fail ;; esac
    if check_tree "$t" >"$tmp/$name.out" 2>&1; then got=pass; else got=fail; fi
    if [ "$got" = "$want" ]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); echo "self-test $name: expected $want, got $got"; cat "$tmp/$name.out"
    fi
  done
  echo "check_words self-test: $pass as expected, $fail not"
  [ "$fail" -eq 0 ]
}

root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  --self-test) self_test ;;
  --root) root=$2 ;&
  "")
    if out=$(check_tree "$root"); then
      echo "check_words: no words about how the work is organised"
    else
      printf '%s\n' "$out"
      echo "check_words: $(printf '%s\n' "$out" | wc -l) offending line(s): say what the software does and why instead"
      exit 1
    fi ;;
  *) echo "usage: check_words.sh [--root DIR | --self-test]"; exit 2 ;;
esac
