#!/usr/bin/env bash
#===- scripts/mutants.sh - Does the test suite catch real source bugs? ----===#
#
# Applies each mutant of scripts/mutants.txt (a realistic one-line bug in ONE
# source file) to a private clean copy of the tree, rebuilds incrementally
# (only the touched file recompiles, then the relinks), runs the normal test
# suite (ctest, restricted to the mutant's regex) and expects it to FAIL:
# "killed". The file is restored after every mutant. A mutant that survives
# its regex is rerun against the whole suite, to tell a regex that is too
# narrow (killed*, by a test outside it) from a blind suite (SURVIVED).
#
# Before any mutant, every entry is checked (its file exists, its original
# text occurs exactly once, its regex selects a test), and the unmutated copy
# is built and must pass the WHOLE suite. Prints a table and writes it to
# $WORK/report.md; logs are in $WORK/logs/.
#
# Exit: 0 every mutant killed; 1 some mutant survived; 2 the list, the build
# of a mutant or the unmutated tree is broken.
#
# Not part of `make test` (it takes tens of minutes): `make mutants`.
#
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIST=$ROOT/scripts/mutants.txt
WORK=${K3C_MUTANTS_DIR:-/tmp/k3c-mutants}
REV=HEAD
JOBS=${JOBS:-2}
BUILD_LOCK=${K3C_BUILD_LOCK:-/tmp/k3c-build.lock}
TEST_TIMEOUT=${K3C_MUTANT_TEST_TIMEOUT:-900}
FULL=0
CHECK_ONLY=0
RECHECK=1
ONLY=()

usage() {
  cat <<EOF
usage: scripts/mutants.sh [options] [ID...]
  ID...           run only these mutants (default: all of the list)
  -l, --list F    mutant list (default scripts/mutants.txt)
  -w, --work D    private copy and build (default \$K3C_MUTANTS_DIR or /tmp/k3c-mutants)
  -r, --rev R     commit to test (default HEAD of this checkout; uncommitted edits are not used)
  -j, --jobs N    build and ctest parallelism (default \$JOBS or 2)
  --full          run the whole suite for every mutant, not its regex
  --no-recheck    do not rerun a survivor against the whole suite
  --check         only check the list against the copy (text found once, regex selects tests)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
  -l | --list) LIST=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
  -w | --work) WORK=$2; shift 2 ;;
  -r | --rev) REV=$2; shift 2 ;;
  -j | --jobs) JOBS=$2; shift 2 ;;
  --full) FULL=1; shift ;;
  --no-recheck) RECHECK=0; shift ;;
  --check) CHECK_ONLY=1; shift ;;
  -h | --help) usage; exit 0 ;;
  -*) echo "mutants: unknown option $1" >&2; usage >&2; exit 2 ;;
  *) ONLY+=("$1"); shift ;;
  esac
done

SRC=$WORK/src
BUILD=$WORK/build
LOGS=$WORK/logs
mkdir -p "$WORK" "$LOGS"

# One job per work directory.
exec 9>"$WORK/.lock"
if ! flock -n 9; then
  echo "mutants: another mutants.sh holds $WORK/.lock" >&2
  exit 2
fi

#--- The list: parse, check, apply (exact text, exactly once) ---------------#
# Python for the text handling: exact substring counts and replacement with
# no quoting or regex surprises.
read -r -d '' PY <<'EOF' || true
import re, sys

def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in "n\\":
            out.append("\n" if s[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)

def parse(path):
    muts, errors, seen = [], [], set()
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split(" | ")
        if len(f) != 6:
            errors.append(f"{path}:{no}: expected 6 fields separated by ' | ', got {len(f)}")
            continue
        mid, file, orig, repl, desc, regex = (x.strip() for x in f)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", mid):
            errors.append(f"{path}:{no}: bad id '{mid}'")
        if mid in seen:
            errors.append(f"{path}:{no}: duplicate id '{mid}'")
        seen.add(mid)
        orig, repl = unescape(orig), unescape(repl)
        if not orig or orig == repl:
            errors.append(f"{path}:{no}: {mid}: empty original or replacement equal to it")
        if not regex:
            errors.append(f"{path}:{no}: {mid}: empty test regex (use * for the whole suite)")
        muts.append(dict(id=mid, file=file, orig=orig, repl=repl, desc=desc, regex=regex, line=no))
    return muts, errors

cmd, path = sys.argv[1], sys.argv[2]
muts, errors = parse(path)
if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(2)
if cmd == "list":  # id, file, regex, description; tab-separated
    for m in muts:
        print("\t".join([m["id"], m["file"], m["regex"], m["desc"]]))
elif cmd == "check":  # every original text occurs exactly once in its file
    src, bad = sys.argv[3], 0
    for m in muts:
        try:
            text = open(f"{src}/{m['file']}", encoding="utf-8").read()
        except OSError as e:
            print(f"{path}:{m['line']}: {m['id']}: cannot read {m['file']}: {e.strerror}", file=sys.stderr)
            bad += 1
            continue
        n = text.count(m["orig"])
        if n != 1:
            print(f"{path}:{m['line']}: {m['id']}: original text occurs {n} times in {m['file']} "
                  f"(must be exactly once): {m['orig']!r}", file=sys.stderr)
            bad += 1
    sys.exit(2 if bad else 0)
elif cmd == "apply":
    src, mid = sys.argv[3], sys.argv[4]
    m = next(m for m in muts if m["id"] == mid)
    p = f"{src}/{m['file']}"
    text = open(p, encoding="utf-8").read()
    n = text.count(m["orig"])
    if n != 1:
        print(f"{mid}: original text occurs {n} times in {m['file']}", file=sys.stderr)
        sys.exit(2)
    open(p, "w", encoding="utf-8").write(text.replace(m["orig"], m["repl"], 1))
EOF

[ -f "$LIST" ] || { echo "mutants: no list $LIST" >&2; exit 2; }
python3 -c "$PY" list "$LIST" >/dev/null || { echo "mutants: fix $LIST" >&2; exit 2; }

IDS=() FILES=() REGEXES=() DESCS=()
while IFS=$'\t' read -r id file regex desc; do
  if [ ${#ONLY[@]} -gt 0 ]; then
    keep=0
    for o in "${ONLY[@]}"; do [ "$o" = "$id" ] && keep=1; done
    [ $keep = 1 ] || continue
  fi
  IDS+=("$id") FILES+=("$file") REGEXES+=("$regex") DESCS+=("$desc")
done < <(python3 -c "$PY" list "$LIST")
for o in "${ONLY[@]}"; do
  found=0
  for id in "${IDS[@]}"; do [ "$o" = "$id" ] && found=1; done
  [ $found = 1 ] || { echo "mutants: no mutant '$o' in $LIST" >&2; exit 2; }
done
[ ${#IDS[@]} -gt 0 ] || { echo "mutants: no mutants to run" >&2; exit 2; }

#--- The private clean copy ---------------------------------------------------#
SHA=$(git -C "$ROOT" rev-parse --verify "$REV^{commit}")
if [ ! -d "$SRC/.git" ]; then
  echo "mutants: cloning $ROOT into $SRC"
  git clone --quiet --no-checkout "$ROOT" "$SRC"
fi
git -C "$SRC" remote set-url origin "$ROOT"
git -C "$SRC" fetch --quiet --force origin '+refs/heads/*:refs/remotes/origin/*' HEAD
# Only files that differ are rewritten, so an unchanged file keeps its mtime
# and its object: the copy rebuilds incrementally from run to run.
git -C "$SRC" checkout --quiet --force --detach "$SHA"
git -C "$SRC" clean -fdxq
echo "mutants: testing $(git -C "$SRC" log -1 --format='%h %s' | cut -c1-100)"

CURRENT=""
restore() {
  if [ -n "$CURRENT" ]; then
    git -C "$SRC" checkout --quiet -- "$CURRENT"
    CURRENT=""
  fi
}
trap 'restore' EXIT
trap 'restore; echo "mutants: interrupted" >&2; exit 130' INT TERM

if [ ! -f "$BUILD/build.ninja" ]; then
  echo "mutants: configuring $BUILD"
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DK3C_ENABLE_COMPILER=ON -DK3C_ENABLE_CUDA=OFF >"$LOGS/configure.log" 2>&1 ||
    { echo "mutants: configure failed, see $LOGS/configure.log" >&2; exit 2; }
fi

build() { # log
  flock "$BUILD_LOCK" cmake --build "$BUILD" -j "$JOBS" >"$1" 2>&1
}
# ctest over `regex` ("*" = all) into `log`; sets FAILED to the failed tests.
run_tests() { # regex log
  local args=(--test-dir "$BUILD" --no-tests=error -j "$JOBS" --timeout "$TEST_TIMEOUT"
    --output-on-failure)
  [ "$1" = "*" ] || args+=(-R "$1")
  local rc=0
  ctest "${args[@]}" >"$2" 2>&1 || rc=$?
  FAILED=$(sed -n '/The following tests FAILED:/,$p' "$2" |
    sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (\(.*\))$/\1/p' | paste -sd, -)
  [ $rc -ne 0 ] && [ -z "$FAILED" ] && FAILED="(ctest exit $rc)"
  return $rc
}
# Up to four failed lit tests / gtest cases named in `log`.
details() { # log
  { grep -o '^  k3c :: [^ ]*' "$1" | sed 's/^  k3c :: /lit:/'
    grep -oE '^\[  FAILED  \] [A-Za-z_][A-Za-z0-9_/]*\.[A-Za-z0-9_/.]+' "$1" |
      sed 's/^\[  FAILED  \] //'; } 2>/dev/null | awk '!seen[$0]++' | head -4 |
    paste -sd' ' - || true
}

#--- Check the list against the copy -------------------------------------------#
bad=0
python3 -c "$PY" check "$LIST" "$SRC" || bad=1
for i in "${!IDS[@]}"; do
  re=${REGEXES[$i]}
  [ "$re" = "*" ] && continue
  n=$(ctest --test-dir "$BUILD" -N -R "$re" 2>/dev/null | sed -n 's/^Total Tests: //p')
  if [ "${n:-0}" -eq 0 ]; then
    echo "mutants: ${IDS[$i]}: regex '$re' selects no test of the suite" >&2
    bad=1
  fi
done
[ $bad = 0 ] || { echo "mutants: fix $LIST" >&2; exit 2; }
echo "mutants: ${#IDS[@]} mutants apply (each original text found exactly once)"
[ $CHECK_ONLY = 1 ] && exit 0

#--- The unmutated tree must build and pass the whole suite ---------------------#
T0=$(date +%s)
echo "mutants: building the unmutated copy (flock $BUILD_LOCK)"
build "$LOGS/clean.build.log" || { echo "mutants: the unmutated copy does not build, see $LOGS/clean.build.log" >&2; exit 2; }
echo "mutants: running the whole suite on the unmutated copy"
if ! run_tests "*" "$LOGS/clean.test.log"; then
  echo "mutants: the UNMUTATED tree fails: $FAILED (see $LOGS/clean.test.log)" >&2
  exit 2
fi
T1=$(date +%s)
echo "mutants: unmutated tree passes ($((T1 - T0)) s)"

#--- The mutants ---------------------------------------------------------------#
RESULTS=() WHO=() SECS=() NOTES=()
killed=0 survived=0 errors=0
for i in "${!IDS[@]}"; do
  id=${IDS[$i]} file=${FILES[$i]} re=${REGEXES[$i]}
  [ $FULL = 1 ] && re="*"
  t0=$(date +%s)
  CURRENT=$file
  python3 -c "$PY" apply "$LIST" "$SRC" "$id"
  result="" who="" note=""
  if ! build "$LOGS/$id.build.log"; then
    result="BUILD-ERROR" who="-" note="does not compile, see $LOGS/$id.build.log"
    errors=$((errors + 1))
  else
    tb=$(date +%s)
    if ! run_tests "$re" "$LOGS/$id.test.log"; then
      result="killed" who=$FAILED note=$(details "$LOGS/$id.test.log")
      killed=$((killed + 1))
    elif [ "$re" != "*" ] && [ $RECHECK = 1 ] &&
      ! run_tests "*" "$LOGS/$id.full.log"; then
      result="killed*" who=$FAILED
      note="outside its regex: $(details "$LOGS/$id.full.log")"
      killed=$((killed + 1))
    else
      result="SURVIVED" who="-"
      [ "$re" != "*" ] && [ $RECHECK = 1 ] && note="the whole suite passes"
      survived=$((survived + 1))
    fi
    note="build $((tb - t0)) s; $note"
  fi
  restore
  t1=$(date +%s)
  RESULTS+=("$result") WHO+=("$who") SECS+=("$((t1 - t0))") NOTES+=("$note")
  printf 'mutants: [%d/%d] %-30s %-9s %s (%d s)\n' $((i + 1)) ${#IDS[@]} "$id" "$result" \
    "$who" $((t1 - t0))
done
T2=$(date +%s)

#--- Report --------------------------------------------------------------------#
{
  echo "Mutants of $(git -C "$SRC" log -1 --format='%h') ($(date -u '+%Y-%m-%d %H:%M UTC')):" \
    "$killed killed, $survived survived, $errors errors of ${#IDS[@]};" \
    "unmutated build + whole suite $((T1 - T0)) s, total $((T2 - T0)) s"
  echo
  echo "| id | file | description | result | failed test | s |"
  echo "|---|---|---|---|---|---|"
  for i in "${!IDS[@]}"; do
    echo "| ${IDS[$i]} | ${FILES[$i]} | ${DESCS[$i]//|/\\|} | ${RESULTS[$i]} | ${WHO[$i]//unit\//} | ${SECS[$i]} |"
  done
  echo
  echo "s = build (incl. waiting for $BUILD_LOCK) + tests. killed* = only by a test outside the"
  echo "mutant's regex (widen the regex). Details: build time, first failed lit tests / gtest cases."
  for i in "${!IDS[@]}"; do
    echo "  ${IDS[$i]}: ${NOTES[$i]}"
  done
} | tee "$WORK/report.md"

[ $errors -gt 0 ] && exit 2
[ $survived -gt 0 ] && exit 1
exit 0
