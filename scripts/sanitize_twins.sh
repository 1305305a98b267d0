#!/usr/bin/env bash
# Run the format codec's twin tests under AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/sanitize_twins.sh [--python PYTHON] [--work DIR] [--keep] [-- PYTEST-ARGS...]

Build the hand-written C extension (journaled/format/_speedups.c) with -fsanitize=address,undefined
(every finding fatal) into a copy of the project under DIR, away from the normal in-place build,
and run its twin tests there (tests/format -- every twin's, unit_records' in
test_speedups_unit.py, the column growth in test_zread_columns.py, the compressed units of
test_compression_format.py -- and tests/log/test_walker_twins.py and
tests/log/test_compression_queue.py, which drive them through the record walker, by default,
leaving out tests/format/test_metadata.py, which runs no C; or PYTEST-ARGS) with that build.  The mypyc-compiled modules are C that mypyc generates from the
package's own Python (checked by mypy, tested both ways by the suite), not hand-written: they are
left out of this build (JOURNALED_MYPYC=0) and run from source here.

  --python PYTHON  the interpreter, with pytest and hypothesis installed (default: .venv/bin/python)
  --work DIR       where the copy and the build go (default: a fresh temporary directory)
  --keep           keep DIR afterwards (removed by default)
  -h, --help       this text

The interpreter is not built with ASan, so the ASan runtime is preloaded (LD_PRELOAD), and
PYTHONMALLOC=malloc sends every Python object to the malloc ASan watches (pymalloc's arenas
would hide a use of a freed object).  Leak detection is off (ASAN_OPTIONS=detect_leaks=0):
CPython leaves objects allocated at exit by design, which would drown any real finding.
Exit status: pytest's; a sanitizer finding aborts the run, with its report on stderr.
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
python="$root/.venv/bin/python"
work=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --python) python="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        --) shift; break ;;
        *) echo "sanitize_twins.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# tests/format/test_metadata.py tests the metadata block's pure-Python codec alone (no C): 15 s
# under the sanitizers for nothing they could find.
[ $# -gt 0 ] || set -- tests/format tests/log/test_walker_twins.py tests/log/test_compression_queue.py \
    --ignore=tests/format/test_metadata.py
case "$python" in
    /*) ;;
    */*) python="$PWD/$python" ;; # a relative path: the build and the tests run from the copy
esac

cc="${CC:-gcc}"
asan="$("$cc" -print-file-name=libasan.so)"
if [ ! -e "$asan" ]; then
    echo "sanitize_twins.sh: no ASan runtime for $cc (libasan.so)" >&2
    exit 2
fi
if [ -z "$work" ]; then
    work="$(mktemp -d "${TMPDIR:-/tmp}/sanitize-twins.XXXXXX")"
fi
if [ "$keep" = 0 ]; then
    trap 'rm -rf "$work"' EXIT
fi

# The copy: the package, its tests and what they read; no build products of the normal build.
mkdir -p "$work/tree"
(cd "$root" && tar -c --exclude='*.so' --exclude=__pycache__ --exclude=.hypothesis \
    journaled tests docs setup.py pyproject.toml README.md pyspark_journaled.py) | tar -x -C "$work/tree"

# -fno-wrapv: CPython's own flags include -fwrapv, under which a signed overflow is defined to
# wrap and UBSan does not report it; the twins must not overflow, so here it is undefined again.
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -fno-wrapv -g -O1"
(cd "$work/tree" && JOURNALED_MYPYC=0 CC="$cc" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
    "$python" setup.py -q build_ext --inplace --build-temp "$work/build" >"$work/build.log" 2>&1) || {
    cat "$work/build.log" >&2
    exit 1
}
if ! ls "$work"/tree/journaled/format/_speedups.*.so >/dev/null 2>&1; then
    cat "$work/build.log" >&2
    echo "sanitize_twins.sh: the sanitized extension was not built" >&2
    exit 1
fi

# Run from the copy, so that its sanitized extension is the one imported.  The tests check that
# the compiled twins are what runs (speedups.implementation == "compiled").
cd "$work/tree"
export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
# A finding aborts the process at once, so pytest must not hold stderr (--capture=sys leaves the
# file descriptor alone): the report goes straight to this script's stderr.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export PYTHONMALLOC=malloc
export JOURNALED_PURE_PYTHON=0
"$python" -c 'import journaled.format.speedups as s; assert s.implementation == "compiled", s.describe(); print("sanitized twins:", s.native.__file__, "-", s.describe())'
"$python" -m pytest -q -p no:cacheprovider --capture=sys "$@"
