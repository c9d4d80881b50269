"""The ids transformers' BertTokenizerFast gives a text, line by line: the reference that a
model's tokenizer files are checked against (crates/bert-core/tests/all/tokenizer_reference.rs).

    python scripts/tokens_reference.py MODEL_DIR TEXT OUT_JSON

MODEL_DIR holds the tokenizer's files (tokenizer.json, vocab.txt, tokenizer_config.json); it is
read with `BertTokenizerFast.from_pretrained(MODEL_DIR)` (in transformers 5, a tokenizer made
from `vocab_file=` alone ignores the vocabulary). TEXT is UTF-8, one example a line; each line
that is not empty is encoded on its own, with [CLS] and [SEP] and no truncation. OUT_JSON records the ids and the
tokens of each line, the versions that made them and the sha256 of TEXT.
"""

import hashlib
import json
import sys

import tokenizers
import transformers
from transformers import BertTokenizerFast


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    model_dir, text_path, out_path = sys.argv[1:]
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    with open(text_path, "rb") as f:
        raw = f.read()
    lines = [line for line in raw.decode("utf-8").splitlines() if line]
    examples = []
    for line in lines:
        ids = tokenizer(line, truncation=False)["input_ids"]
        examples.append({"text": line, "ids": ids, "tokens": tokenizer.convert_ids_to_tokens(ids)})
    out = {
        "made_with": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "text_sha256": hashlib.sha256(raw).hexdigest(),
        "examples": examples,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(examples)} lines, {sum(len(e['ids']) for e in examples)} ids, written to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
