#!/bin/sh
# The kubelet's device plugin API, v1beta1 (`api.proto` of k8s.io/kubelet), for the project's
# own stub build (scripts/deviceplugin_stubs.py). Nothing of it is committed: it comes from
# Debian's golang-github-kubernetes-kubelet-dev, the installed one when there is one
# (/usr/share/gocode), else the package downloaded from Debian (trixie or sid: bookworm has
# none) with apt's own client and a private apt config (the host's apt state is untouched)
# and unpacked, never installed. KUBELET_PROTO=/path/to/api.proto (any kubelet source tree)
# skips both.
#
#   scripts/kubelet-proto.sh DEST      writes DEST/api.proto and DEST/SOURCE (where it came from)
set -eu
DEST=${1:?usage: kubelet-proto.sh DEST}
PACKAGE=golang-github-kubernetes-kubelet-dev
INNER=usr/share/gocode/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto
mkdir -p "$DEST"
if [ -n "${KUBELET_PROTO:-}" ]; then
    [ -f "$KUBELET_PROTO" ] || { echo "kubelet-proto: KUBELET_PROTO=$KUBELET_PROTO: no such file" >&2; exit 1; }
    cp "$KUBELET_PROTO" "$DEST/api.proto.tmp"
    echo "$KUBELET_PROTO" > "$DEST/SOURCE"
elif [ -f "/$INNER" ]; then
    cp "/$INNER" "$DEST/api.proto.tmp"
    echo "/$INNER ($(dpkg-query -W -f='${Package} ${Version}' $PACKAGE 2>/dev/null || echo installed))" > "$DEST/SOURCE"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/kubelet-proto.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    {
        echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main"
        echo "deb [signed-by=$keyring] http://deb.debian.org/debian sid main"
    } > "$work/sources.list"
    set -- -o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=- \
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" \
        -o Dir::State::status=/var/lib/dpkg/status -o APT::Sandbox::User=root -q
    apt-get "$@" update >"$work/update.log" 2>&1 \
        || { echo "kubelet-proto: apt-get update of trixie/sid failed: $(tail -n 1 "$work/update.log")" >&2; exit 1; }
    (cd "$work" && apt-get "$@" download "$PACKAGE" >"$work/download.log" 2>&1) \
        || { echo "kubelet-proto: apt-get download $PACKAGE failed: $(tail -n 1 "$work/download.log")" >&2; exit 1; }
    deb=$(ls "$work"/${PACKAGE}_*.deb)
    dpkg-deb -x "$deb" "$work/x"
    [ -f "$work/x/$INNER" ] || { echo "kubelet-proto: $deb has no $INNER" >&2; exit 1; }
    cp "$work/x/$INNER" "$DEST/api.proto.tmp"
    echo "$(basename "$deb") from Debian" > "$DEST/SOURCE"
fi
mv "$DEST/api.proto.tmp" "$DEST/api.proto"
