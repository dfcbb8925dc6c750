#!/bin/sh
# `regrow bench gpu` on a GPU box that has torch, transformers, accelerate and peft but no network and no regrow:
# installs the carried wheels (`make wheelhouse-gpu`) into a folder of its own, then runs the check from this tree.
# The wheels pass 64 MiB (pyarrow alone is 55 MB): a device whose upload is smaller takes them in two calls, the
# folder `big` first (`run.sh --install-only`), then `rest` and the check; the installed folder stays between calls.
set -eu
wheels=${REGROW_GPU_WHEELS:-.cache/wheelhouse-gpu}
# named site-packages: dill (under datasets' fingerprints) pickles a module elsewhere by value, and pyarrow's fails
site=${REGROW_GPU_SITE:-.cache/gpu-check/site-packages}
mkdir -p "$site"
found=$(find "$wheels" -name '*.whl' 2>/dev/null || true)
if [ -n "$found" ]; then
    # shellcheck disable=SC2086 # one argument per wheel
    python3 -m pip install -q --no-deps --no-index --disable-pip-version-check --target "$site" --upgrade $found
fi
[ "${1:-}" = "--install-only" ] && exit 0
PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m regrow.bench.gpu_check --json "$@"
