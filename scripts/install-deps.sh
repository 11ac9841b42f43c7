#!/bin/sh
# install-deps.sh PACKAGE... -- COMMAND...
# Installs the Debian packages when any of the commands is missing. Runs
# `apt-get update` once before installing. Fails when something is still missing.
set -eu
packages=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do packages="$packages $1"; shift; done
[ $# -gt 0 ] && shift
PATH="$PATH:/usr/sbin:/sbin"
missing=""
for c in "$@"; do command -v "$c" >/dev/null 2>&1 || missing="$missing $c"; done
# php-memcached and php-mysql are PHP extensions, not commands.
if command -v php >/dev/null 2>&1; then
  php -m 2>/dev/null | grep -qi '^memcached$' || missing="$missing php-memcached"
  php -m 2>/dev/null | grep -qi '^mysqli$' || missing="$missing php-mysql"
fi
[ -z "$missing" ] && exit 0
echo "install-deps: missing:$missing; installing:$packages"
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: not root; run: sudo apt-get update && sudo apt-get install -y$packages" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq $packages >/dev/null
for c in "$@"; do
  command -v "$c" >/dev/null 2>&1 || { echo "install-deps: $c still missing after installing$packages" >&2; exit 1; }
done
