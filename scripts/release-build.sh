#!/usr/bin/env bash
# Builds the release binaries as .github/workflows/release.yml does, without
# Docker: for every platform the workflow publishes, the Dockerfile's own
# `go build` line (read from the Dockerfile, not copied) with the build
# arguments the workflow passes (VERSION = the tag, REVISION = the commit),
# cross-compiled with GOOS/GOARCH; then checks that each binary is for its
# platform, static, built with the release tags and stamped with the tag,
# and that the one this machine runs reports the tag as `sluice version`
# does in the workflow's last step. A broken build line, build argument or
# platform list fails it. scripts/test.sh runs it (step "release build").
#
#   scripts/release-build.sh [TAG]     (default v0.0.0-release.check)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/prereq.sh
prereq_go

tag=${1:-v0.0.0-release.check}
revision=$(git rev-parse HEAD 2>/dev/null || echo 0123456789abcdef0123456789abcdef01234567)
workflow=.github/workflows/release.yml

fail() {
  echo "release build: $*" >&2
  exit 1
}

# The platforms the workflow builds and pushes (build-push-action's
# `platforms:`), and the build arguments it passes.
mapfile -t lines < <(sed -n 's/^ *platforms: *//p' "$workflow")
[ ${#lines[@]} -eq 1 ] || fail "want one platforms: line in $workflow, found ${#lines[@]}"
IFS=, read -r -a platforms <<<"${lines[0]// /}"
[ ${#platforms[@]} -gt 0 ] || fail "no platform in $workflow"
grep -q 'VERSION=${{ github.ref_name }}' "$workflow" || fail "$workflow does not pass VERSION=\${{ github.ref_name }}"
grep -q 'REVISION=${{ github.sha }}' "$workflow" || fail "$workflow does not pass REVISION=\${{ github.sha }}"

# The builder image's Go must be the Go that go.mod asks for (major.minor).
builder=$(sed -n 's/^FROM golang:\([0-9.]*\).* AS build$/\1/p' Dockerfile)
want=$(sed -n 's/^go \([0-9]*\.[0-9]*\).*/\1/p' go.mod)
[ -n "$builder" ] || fail "no 'FROM golang:X.Y AS build' line in the Dockerfile"
[ "$builder" = "$want" ] || fail "the Dockerfile builds with golang:$builder, go.mod asks for go $want"

# The Dockerfile's build command: the RUN line that runs go build, with its
# continuation lines. Its ${VERSION} and ${REVISION} are the build
# arguments, expanded by the shell as in the image build.
cmd=$(awk '
  /^RUN / && /go build/ { on = 1; sub(/^RUN /, "") }
  on { line = $0; more = (line ~ /\\$/); sub(/\\$/, "", line); printf "%s ", line; if (!more) exit }
' Dockerfile)
[ -n "$cmd" ] || fail "no 'RUN ... go build' line in the Dockerfile"
case $cmd in
  *"-o /out/sluice ./cmd/sluice"*) ;;
  *) fail "the Dockerfile's build line does not end in '-o /out/sluice ./cmd/sluice': $cmd" ;;
esac
echo "build line: $cmd"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
native="$(go env GOOS)/$(go env GOARCH)"
for platform in "${platforms[@]}"; do
  os=${platform%%/*}
  arch=${platform#*/}
  bin="$out/$os-$arch/sluice"
  mkdir -p "$out/$os-$arch"
  echo "== $platform"
  # -buildvcs=false: the image's build context has no .git (.dockerignore),
  # so the revision shown is REVISION's, as in the image.
  VERSION=$tag REVISION=$revision GOOS=$os GOARCH=$arch GOFLAGS=-buildvcs=false \
    sh -c "${cmd//\/out\/sluice/$bin}" || fail "$platform: the build failed"
  info=$(go version -m "$bin") || fail "$platform: go version -m: not a Go binary"
  # (-trimpath leaves -ldflags out of the build information: the stamp is
  # checked in the binary itself below.)
  for want in "GOOS=$os" "GOARCH=$arch" "CGO_ENABLED=0" "-tags=timetzdata,vtprotobuf"; do
    grep -qF -- "$want" <<<"$info" || fail "$platform: the binary's build information lacks $want:"$'\n'"$info"
  done
  grep -qaF -- "$tag" "$bin" || fail "$platform: the tag $tag is not in the binary"
  grep -qaF -- "$revision" "$bin" || fail "$platform: the revision $revision is not in the binary"
  if [ "$platform" = "$native" ]; then
    got=$("$bin" version)
    case $got in
      "sluice $tag (revision $revision"*) echo "$got" ;;
      *) fail "$platform: sluice version says \"$got\", want \"sluice $tag (revision $revision...\"" ;;
    esac
  else
    echo "built for $platform (not run here: checked by its build information)"
  fi
done
echo "release build: ${platforms[*]} built from the Dockerfile's line, stamped $tag"
