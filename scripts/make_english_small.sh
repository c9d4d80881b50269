#!/usr/bin/env bash
# Makes golden/english-small, the course's pretrained English BERT, from nothing: the corpus
# (scripts/english_corpus.py, Austen and the World English Bible from Debian's packages), a
# WordPiece vocabulary trained on it (scripts/english_vocab.py), new weights for the config
# below, then `bert-trace train` in two phases, as Google pretrained BERT (most steps on short
# sequences, then a few on full-length ones, so that every position embedding is trained).
#
#     bash scripts/make_english_small.sh [PYTHON]
#
# PYTHON has `tokenizers` (scripts/requirements.txt pins it) [default: python3]. Work goes to
# target/english-small/; a phase that was stopped resumes from its newest checkpoint when the
# script is run again, and a finished phase is not run again. The result is copied into
# golden/english-small/ with a RECIPE.md that records the commands, the corpus's sha256, the
# commit and the wall time of each phase. The steps are fixed: on 2 cores of an AMD EPYC (Zen 4)
# the whole recipe takes about 85 minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$root/target/english-small"
corpus="$root/target/corpus/english"
out="$root/golden/english-small"
bert_trace="$root/target/release/bert-trace"
cd "$root"

cargo build --release --quiet -p bert-trace
python3 scripts/english_corpus.py
mkdir -p "$work/init"
"$python" scripts/english_vocab.py "$corpus/train.txt" "$work/init" --size 8192
# The vocabulary golden/english-small was trained with: another one would make another model.
echo "bd55bcd2eccbaa52154267db3c36d0bda3839ce4586d46c42f103ec0490dad9b  $work/init/vocab.txt" | sha256sum -c --quiet - \
  || { echo "error: the vocabulary is not the one golden/english-small was made with (a tie in the trainer's merges?)" >&2; exit 1; }

# The shape, chosen for the budget (chapter 17 says why): 8,192 words, hidden 256, 4 layers of
# 4 heads, 128 positions; 5.4M parameters, 21 MiB in float32. Dropout as BERT's.
cat > "$work/init/config.json" <<'EOF'
{
  "architectures": ["BertForPreTraining"],
  "model_type": "bert",
  "vocab_size": 8192,
  "hidden_size": 256,
  "num_hidden_layers": 4,
  "num_attention_heads": 4,
  "intermediate_size": 1024,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "attention_probs_dropout_prob": 0.1,
  "max_position_embeddings": 128,
  "type_vocab_size": 2,
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-12,
  "pad_token_id": 0
}
EOF

# Options both phases share: the documents packed into sequences, 30% of the tokens masked
# (BERT's 80/10/10), AdamW as BERT's recipe has it (no decay for biases and LayerNorm, clipping
# at 1), and the held-out text evaluated every 200 steps.
common=(--file "$corpus/train.txt" --documents --mask-prob 0.3
  --betas 0.9,0.98 --weight-decay 0.01 --no-decay bias,LayerNorm --max-grad-norm 1.0
  --eval-file "$corpus/heldout.txt" --eval-every 200 --log-every 50 --dropout 0)
# Phase 1: 8,000 steps of 64 sequences of at most 64 tokens, from new weights.
phase1=(--model "$work/init" --from-config --seed 0 --steps 8000 --batch-size 64 --max-len 64
  --lr 1e-3 --warmup-steps 300 --save-every 1000)
# Phase 2: 1,600 steps of 32 sequences of at most 128 tokens, from phase 1's weights, at phase
# 1's peak rate: positions 64 to 127 start from their new weights.
phase2=(--model "$work/phase-1" --seed 1 --steps 1600 --batch-size 32 --max-len 128
  --lr 1e-3 --warmup-steps 160 --save-every 400)

source "$root/scripts/course_model.sh"
run_phase "$work/phase-1" "$work/phase-1.log" "${phase1[@]}"
run_phase "$work/phase-2" "$work/phase-2.log" "${phase2[@]}"

# The inputs of phase 1's first five steps (without dropout, as the run had none), the model,
# and the facts for RECIPE.md.
keep_first_steps --dropout 0
keep_model phase-1 phase-2
