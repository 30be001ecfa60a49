#!/usr/bin/env bash
# Creates the peers' own venvs for the object-store benchmark (benchmarks/bench_remote_peers.py):
# LitData in /tmp/venv-litdata and MosaicML Streaming in /tmp/venv-streaming, each with the CPU build
# of torch pinned through the project's constraints (an unpinned torch pulls a multi-GB CUDA build).
# Streaming needs numpy < 2.2 and transformers < 5, so the peers' venvs take only torch's pins.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
py="${PYTHON:-python3.11}"
# only torch's family is pinned from the project (the CPU build); each peer resolves the rest itself
grep -iE '^(torch|torchvision)==' "$here/constraints.txt" > /tmp/rd-peers-constraints.txt
make_venv() {  # name, packages...
    local name="$1"; shift
    local venv="/tmp/venv-$name"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/pip" install -q -c /tmp/rd-peers-constraints.txt "torch==2.13.0" boto3 "$@"
    if "$venv/bin/pip" list 2>/dev/null | grep -qi nvidia; then
        echo "a CUDA wheel slipped into $venv: remove the venv and check the constraints" >&2; exit 1
    fi
    echo "$venv: $("$venv/bin/python" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
}
make_venv litdata litdata
make_venv streaming mosaicml-streaming "numpy<2.2"
# the torchvision wheel it pulls is linked against CUDA torch and cannot load beside the CPU build;
# remote_peer.py gives Streaming's vision module empty stand-ins instead
/tmp/venv-streaming/bin/pip uninstall -q -y torchvision
