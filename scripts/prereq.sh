# shellcheck shell=bash
# Sourced by scripts/run.sh and scripts/test.sh: finds Go and installs what
# the command needs on Debian or Ubuntu. As root it runs apt-get for what is
# missing (and only then); as any other user it prints the exact command and
# stops. Nothing is installed when everything is there.

# prereq_go puts Go on PATH (a tarball install in /usr/local/go is found
# even when PATH lacks it) or stops with where to get it.
prereq_go() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "Go is not installed: get Go 1.26 or later from https://go.dev/dl/ (tar -C /usr/local -xzf go*.tar.gz)" >&2
    exit 1
  fi
}

# prereq_install PKG:CHECK ... installs each Debian package PKG whose CHECK
# fails. CHECK is a command name, or a path (starting with /) that must exist.
prereq_install() {
  local missing=() item pkg check
  for item in "$@"; do
    pkg=${item%%:*}
    check=${item#*:}
    case $check in
      /*) [ -e "$check" ] && continue ;;
      *) command -v "$check" >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing: ${missing[*]}" >&2
    echo "install them, then run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: ${missing[*]} (Debian package names), and there is no apt-get to install them" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# prereq_base lists what every command needs: CA certificates to download Go
# modules, and git when the tree is a git clone (go build stamps the
# revision it finds there).
prereq_base() {
  local need=(ca-certificates:/etc/ssl/certs/ca-certificates.crt)
  [ -e .git ] && need+=(git:git)
  printf '%s\n' "${need[@]}"
}
