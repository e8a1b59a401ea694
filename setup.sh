#!/usr/bin/env bash
# Quick start, step 1: install everything, bring up the local lab (a controller and two
# 8-GPU nodes as containers) and provision it with a real Ansible run.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/bootstrap.sh
.venv/bin/provision lab up --nodes "${LAB_NODES:-2}" --gpus-per-node "${LAB_GPUS:-8}"
.venv/bin/provision inventory validate --inventory lab
.venv/bin/provision apply --inventory lab
