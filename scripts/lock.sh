#!/usr/bin/env bash
# Re-pin requirements.lock from pyproject.toml (run after changing dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --quiet
.venv/bin/uv pip compile pyproject.toml --extra test --python .venv/bin/python \
    --python-version 3.11 --find-links /opt/wheels --no-header -o requirements.lock
