#!/bin/sh
# Fills the trainer's venv (a named volume) with the `train` extra from the host's wheelhouse, with no network.
# The images never carry torch (5.5 GB with CUDA): building it into one held the wheels twice more on disk.
# regrow itself comes from the app image's venv through a .pth file, so a rebuilt app image is what the trainer runs.
set -eu
target=${1:-/opt/regrow/train}
wheels=${2:-/wheels}
app=/opt/regrow/venv
[ -x "$target/bin/python" ] || python3 -m venv --without-pip "$target"
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
"$app/bin/python" -c "$purelib" > "$("$target/bin/python" -c "$purelib")/regrow-app.pth"
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
    if "$target/bin/python" -c "import torch, trl" 2>/dev/null; then
        echo "no wheels in $wheels; keeping the train packages already in $target"
        exit 0
    fi
    echo "no wheels in $wheels: run \`make wheelhouse-train\` on the host, then start the train profile again" >&2
    exit 1
fi
pip() { "$app/bin/pip" --python "$target/bin/python" install --no-index --no-cache-dir --disable-pip-version-check -q "$@"; }
pip --find-links /opt/regrow/wheelhouse --find-links "$wheels" 'regrow[train]'
pip --no-deps "$wheels"/demo-model/*.whl
echo "train packages ready in $target"
