#!/usr/bin/env bash
# Makes golden/chinese-small, the course's pretrained Chinese BERT, from nothing, by the recipe
# of golden/english-small: the corpus (scripts/chinese_corpus.py: classical poems and classics
# from the npm package chinese-poetry, in Simplified characters), a vocabulary of one token a
# character (scripts/chinese_vocab.py), new weights for the config below, then `bert-trace
# train` in three phases: most steps on short sequences of the whole text, then a few on
# full-length ones, so that every position embedding is trained, as Google pretrained BERT; then
# the anthologies and the classics a reader recites (recited.txt), read many times over without
# dropout, so that the model remembers them as a reader does.
#
#     bash scripts/make_chinese_small.sh [PYTHON]
#
# PYTHON has `opencc` and `tokenizers` (scripts/requirements.txt pins them) [default: python3].
# Work goes to target/chinese-small/; a phase that was stopped resumes from its newest checkpoint
# when the script is run again, and a finished phase is not run again. The result is copied into
# golden/chinese-small/; the facts for its RECIPE.md (the corpus's sha256, the commit and the
# wall time of each phase) go to target/chinese-small/provenance.txt. The steps are fixed: on 2
# cores of an AMD EPYC (Zen 4, AVX-512) the whole recipe takes about 85 minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$root/target/chinese-small"
corpus="$root/target/corpus/chinese"
out="$root/golden/chinese-small"
bert_trace="$root/target/release/bert-trace"
cd "$root"

cargo build --release --quiet -p bert-trace
"$python" scripts/chinese_corpus.py
mkdir -p "$work/init"
"$python" scripts/chinese_vocab.py "$corpus/train.txt" "$work/init" --min-count 3
# The vocabulary golden/chinese-small was trained with: another one would make another model.
echo "5cba96cc3a85d000a73a80c7410f75b16851738a2b053d9038a9f63a9d11b05d  $work/init/vocab.txt" | sha256sum -c --quiet - \
  || { echo "error: the vocabulary is not the one golden/chinese-small was made with (another corpus?)" >&2; exit 1; }

# The shape of golden/english-small, with a vocabulary of characters: hidden 256, 4 layers of 4
# heads, 128 positions. Dropout as BERT's.
cat > "$work/init/config.json" <<'EOF'
{
  "architectures": ["BertForPreTraining"],
  "model_type": "bert",
  "vocab_size": 5607,
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

# Options every phase shares: the documents packed into sequences, 30% of the tokens masked
# (BERT's 80/10/10), AdamW as BERT's recipe has it (no decay for biases and LayerNorm, clipping
# at 1), and the held-out text evaluated every 200 steps.
common=(--documents --mask-prob 0.3
  --betas 0.9,0.98 --weight-decay 0.01 --no-decay bias,LayerNorm --max-grad-norm 1.0
  --eval-file "$corpus/heldout.txt" --eval-every 200 --log-every 50)
# Phase 1: 2,000 steps of 64 sequences of at most 64 tokens of the whole text, from new weights.
phase1=(--file "$corpus/train.txt" --model "$work/init" --from-config --seed 0 --steps 2000
  --batch-size 64 --max-len 64 --lr 1e-3 --warmup-steps 150 --save-every 250)
# Phase 2: 300 steps of 32 sequences of at most 128 tokens, from phase 1's weights, at phase
# 1's peak rate: positions 64 to 127 start from their new weights.
phase2=(--file "$corpus/train.txt" --model "$work/phase-1" --seed 1 --steps 300 --batch-size 32
  --max-len 128 --lr 1e-3 --warmup-steps 30 --save-every 100)
# Phase 3: 3,600 steps of 64 sequences of at most 64 tokens of recited.txt (the anthologies and
# the classics a reader learns by heart: about 34 times over, the anthologies about 68), without
# dropout: remembering, which dropout exists to hold back.
phase3=(--file "$corpus/recited.txt" --model "$work/phase-2" --seed 2 --steps 3600 --batch-size 64
  --max-len 64 --lr 1e-3 --warmup-steps 50 --dropout 0 --save-every 200)

source "$root/scripts/course_model.sh"
run_phase "$work/phase-1" "$work/phase-1.log" "${phase1[@]}"
run_phase "$work/phase-2" "$work/phase-2.log" "${phase2[@]}"
run_phase "$work/phase-3" "$work/phase-3.log" "${phase3[@]}"

# The inputs of phase 1's first five steps, the model, and the facts for RECIPE.md.
keep_first_steps
keep_model phase-1 phase-2 phase-3
