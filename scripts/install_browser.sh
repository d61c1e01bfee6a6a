#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver for the browser tests (tests/test_browser.py), which
# expect /usr/bin/chromium and /usr/bin/chromedriver. Does nothing when both are present.
# Runs as root (apt-get); exits non-zero when anything fails. Prints the versions.
# Usage: bash scripts/install_browser.sh
set -euo pipefail
browser=/usr/bin/chromium
driver=/usr/bin/chromedriver
if [ ! -x "$browser" ] || [ ! -x "$driver" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_browser.sh: $browser or $driver is missing and installing them needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
for exe in "$browser" "$driver"; do
  if [ ! -x "$exe" ]; then
    echo "install_browser.sh: $exe is still missing after installing chromium and chromium-driver" >&2
    exit 1
  fi
done
# Debian's chromium wrapper script prints a harmless shell warning on some machines; keep only the version line
"$browser" --version 2>/dev/null | tail -n 1
"$driver" --version
