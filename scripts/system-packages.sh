#!/usr/bin/env bash
# The Debian packages the tests start for real: Prometheus, an OCI registry, skopeo, chromium (Playwright
# drives it) and PostgreSQL. Installs the missing ones when run as root on Debian; otherwise stops at once
# with the one command to run. `make test` calls it; so does CI through `make test`.
set -euo pipefail

PACKAGES=(prometheus docker-registry skopeo chromium postgresql)

has() {  # has PACKAGE: is what the tests need from PACKAGE on this machine?
  case "$1" in
    postgresql) compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

missing=()
for p in "${PACKAGES[@]}"; do has "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "installing the Debian packages the tests need: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  $command >/dev/null
  exit 0
fi
echo "the tests need these Debian packages, missing here: ${missing[*]}" >&2
echo "install them, then run make test again:  sudo apt-get update && sudo $command" >&2
exit 1
