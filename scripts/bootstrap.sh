#!/usr/bin/env bash
# Install what the project needs on a Debian 12 (or Ubuntu) machine, as root:
# system packages (Docker engine, debootstrap, SSH client, Python venv), the Python
# virtual environment .venv with the pinned dependencies, and promtool (the alert rules'
# unit tests) taken out of the distribution's prometheus package, without installing the
# package or starting its service. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: run as root (the lab starts the Docker engine and builds images)" >&2
  exit 2
fi

# fio: the launcher's storage instrument runs it in the unit tests as on the nodes.
# chromium, chromium-driver and a font: the tests open the certification page in a real browser.
packages=(docker.io debootstrap openssh-client python3 python3-venv iproute2 ca-certificates fio
          chromium chromium-driver fonts-dejavu-core)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "bootstrap: Python 3.11 or newer is needed ($python is $("$python" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv"
  "$python" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -e "$stamp" ]; then
  say "installing Python dependencies (pinned in constraints.txt)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# The Prometheus version the monitoring role pins (roles/monitoring/defaults/main.yml).
prometheus_version=$(sed -n 's/^monitoring_prometheus_version: "\(.*\)"$/\1/p' roles/monitoring/defaults/main.yml)
if [ "$(.venv/bin/promtool --version 2>/dev/null | sed -n 's/^promtool, version \([^ ]*\).*/\1/p')" \
     != "${prometheus_version%%-*}" ]; then
  say "extracting promtool from prometheus $prometheus_version"
  workdir=$(mktemp -d)
  (cd "$workdir" && apt-get download -qq "prometheus=$prometheus_version" 2>/dev/null) || {
    apt-get update -qq
    (cd "$workdir" && apt-get download -qq "prometheus=$prometheus_version")
  }
  dpkg-deb -x "$workdir"/prometheus_*.deb "$workdir/root"
  install -m 0755 "$workdir/root/usr/bin/promtool" .venv/bin/promtool
  rm -rf "$workdir"
fi
say "ready: .venv/bin/provision"
