#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: graph-tool and chromium from Debian, a venv made from
# /usr/bin/python3 with --system-site-packages, the pinned dependencies, and grace itself.
# A second run only compares a stamp and returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=0; [ "${1:-}" = "--quiet" ] && quiet=1
say() { [ "$quiet" = 1 ] || echo "[setup] $*" >&2; }

SYS_PY=/usr/bin/python3
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! "$SYS_PY" -c "import graph_tool" >/dev/null 2>&1 || ! "$SYS_PY" -c "import ensurepip" >/dev/null 2>&1; then
    say "installing Debian packages python3-graph-tool python3-venv (apt-get)"
    as_root apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
        python3-graph-tool python3-venv >/dev/null
fi

# Debian's chromium for the browser tests (tests/ui, tests/trust): Playwright drives it, and never
# downloads a browser of its own.
if [ ! -x /usr/bin/chromium ]; then
    say "installing Debian package chromium (apt-get)"
    as_root apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends chromium >/dev/null
fi

# The stamp also names the install recipe ("pyc": packages compiled to bytecode at install), so a
# venv made by an older recipe is brought up to date once.
stamp_src="$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1) pyc"
if [ -x .venv/bin/python ] && [ -f .venv/.grace-stamp ] && [ "$(cat .venv/.grace-stamp)" = "$stamp_src" ]; then
    exit 0
fi

if [ ! -x .venv/bin/python ]; then
    say "creating .venv from $SYS_PY (--system-site-packages, for graph-tool)"
    "$SYS_PY" -m venv --system-site-packages .venv
fi
if [ ! -x .venv/bin/uv ]; then
    say "installing uv into .venv"
    .venv/bin/python -m pip install -q uv
fi
links=(); [ -d /opt/wheels ] && links=(--find-links /opt/wheels)
say "installing pinned dependencies (requirements.lock)"
.venv/bin/uv pip install -q --python .venv/bin/python "${links[@]}" -r requirements.lock
.venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
# Bytecode for the installed packages: uv writes none, and where PYTHONDONTWRITEBYTECODE is set (as on
# this machine) Python never caches it either, so each process would compile litellm, openai,
# matplotlib... from source again (seconds of CPU per process, per test run). A few files that are
# not Python 3 (templates, test data of some packages) fail to compile and are left as they are.
# Left out: the packages' own test suites (their tests/ and test/ folders) and the parts of
# packages that neither grace nor its tests import (measured from the bytecode files a whole
# test run read: transformers' hundreds of model families, litellm's proxy server, torch's
# compiler and testing kit, the AWS services moto fakes for others, packages only other packages
# name...), 30% of the bytecode and of this step's time; a process that does import one compiles
# it then, and ./dev's processes cache it.
unused=(
    '/tests?/'
    '/transformers/(models|pipelines|exporters)/' '/litellm/proxy/' '/torch/(testing|_inductor)/'
    '/openai/resources/' '/sympy/(physics|combinatorics|stats)/'
    '/moto/(stepfunctions|ec2|dynamodb|sagemaker|rds)/' '/dask/(dataframe|array)/'
    '/scipy/(signal|io)/' '/sklearn/(linear_model|ensemble|model_selection|cluster|decomposition|datasets)/'
    '/numba/cuda/' '/numpy/(distutils|f2py)/' '/sqlalchemy/testing/' '/duckdb/experimental/'
    '/huggingface_hub/(cli|inference)/' '/hypothesis/extra/' '/narwhals/_pandas_like/'
    '/site-packages/(apprise|cfnlint|dateparser|fontTools|graphql|key_value|oauthlib|rich_rst|setuptools)/'
)
say "compiling the installed packages to bytecode"
.venv/bin/python -m compileall -qq -j 0 -x "$(IFS='|'; echo "${unused[*]}")" \
    "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
echo "$stamp_src" > .venv/.grace-stamp
say "ready"
