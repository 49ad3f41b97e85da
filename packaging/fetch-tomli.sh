#!/bin/sh
# The tomli wheel that the RPM bundles (and `make install` for a Python without tomllib):
# the version and sha256 of packaging/ocihook.spec (tomli_version, tomli_sha256), from the
# package registry by pip (--require-hashes), kept in DIR and reused while its hash matches.
# Offline: put the wheel in DIR first. Prints the wheel's path.
#
#   packaging/fetch-tomli.sh DIR [PYTHON]   PYTHON's pip downloads it (default python3)
set -eu

spec="$(dirname "$0")/ocihook.spec"
version=$(sed -n 's/^%global tomli_version \([^ ]*\)$/\1/p' "$spec")
sha256=$(sed -n 's/^%global tomli_sha256 \([0-9a-f]\{64\}\)$/\1/p' "$spec")
if [ -z "$version" ] || [ -z "$sha256" ] || [ -z "${1:-}" ]; then
    echo "usage: $0 DIR [PYTHON] (and $spec with tomli_version and tomli_sha256)" >&2
    exit 2
fi
dir=$1
python=${2:-python3}
wheel="$dir/tomli-$version-py3-none-any.whl"

matches() {
    [ -f "$wheel" ] && echo "$sha256  $wheel" | sha256sum -c --status
}

if ! matches; then
    mkdir -p "$dir"
    rm -f "$wheel"
    printf 'tomli==%s --hash=sha256:%s\n' "$version" "$sha256" > "$dir/tomli-requirement.txt"
    "$python" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps \
        --only-binary :all: --require-hashes -d "$dir" -r "$dir/tomli-requirement.txt" >&2 || {
        echo "fetch-tomli: $python -m pip could not download tomli $version; put" \
            "tomli-$version-py3-none-any.whl (sha256 $sha256) in $dir" >&2
        exit 1
    }
    matches || { echo "fetch-tomli: $wheel: not sha256 $sha256" >&2; exit 1; }
fi
echo "$wheel"
