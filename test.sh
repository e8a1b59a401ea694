#!/usr/bin/env bash
# Quick start, step 2: run the whole test suite (unit, wrapper, lab, Molecule, lint).
# Installs what it needs first, so it works from a clean clone.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
