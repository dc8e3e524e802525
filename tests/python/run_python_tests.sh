#!/bin/sh
# Runs the Python binding's pytest suite under shmesh-run on N ranks:
#
#   run_python_tests.sh PYTHON LAUNCHER LIBRARY PYTHON_SRC TESTS_DIR N [TEST_FILE]
#
# PYTHON: an interpreter with numpy ('' when meson found none); LIBRARY:
# the built libshmesh.so.0; PYTHON_SRC: the directory holding the shmesh
# package.  Exits 77 (meson's "skipped"), saying why, without a Python with
# numpy and pytest or the compiled module, or when the library is sanitized (ctypes cannot load an
# ASan library into an interpreter built without it).
# Each line of output is prefixed with its rank ([R]).
py=$1 launcher=$2 lib=$3 src=$4 tests=$5 n=$6 only=${7:-}
if [ -z "$py" ]; then
  echo "skipped: no python3 that imports numpy (python_with_numpy is empty)"
  exit 77
fi
if [ "${SHMESH_PYTHON_EXT_BUILT:-1}" = 0 ]; then
  echo "skipped: the compiled module shmesh._ext was not built (Debian: python3-dev)"
  exit 77
fi
if ! "$py" -c 'import pytest' 2>/dev/null; then
  echo "skipped: $py cannot import pytest (Debian: apt-get install python3-pytest)"
  exit 77
fi
if command -v ldd >/dev/null 2>&1 && ldd "$lib" 2>/dev/null | grep -q libasan; then
  echo "skipped: $lib is sanitized; a Python without ASan cannot load it"
  exit 77
fi
SHMESH_LIBRARY=$lib
PYTHONPATH=$src${PYTHONPATH:+:$PYTHONPATH}
SHMESH_RUN=$launcher
export SHMESH_LIBRARY PYTHONPATH SHMESH_RUN
# no inherited limit: the Timeout job sets its own
unset SHMESH_TIMEOUT
# the ranks' gates (gate.py): a directory of this run's, removed after it
SHMESH_TEST_GATE=$(mktemp -d "${TMPDIR:-/tmp}/shmesh-test-gate-XXXXXX") || exit 1
export SHMESH_TEST_GATE
trap 'rm -rf "$SHMESH_TEST_GATE"' EXIT
trap 'exit 143' TERM INT
"$launcher" --tag-output -n "$n" --timeout 300 -- "$py" -m pytest -q -p no:cacheprovider \
  --rootdir "$tests" "${only:-$tests}"
exit $?
