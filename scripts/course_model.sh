# The steps scripts/make_english_small.sh and scripts/make_chinese_small.sh share, sourced by
# both after they set root, work (target/NAME), corpus (its train.txt, heldout-sample.txt and
# SHA256SUMS), out (golden/NAME), bert_trace (the release binary) and common (the options every
# phase shares).

# Runs one phase into DIR, or resumes it from its newest checkpoint; a finished phase is kept.
run_phase() {
  local dir="$1" log="$2"
  shift 2
  if [ -f "$dir/trainer_state.json" ] && [ -f "$dir/model.safetensors" ]; then
    echo "$dir is finished; kept" >&2
    return
  fi
  local newest
  newest="$(ls -d "$dir"/checkpoint-* 2>/dev/null | sort -V | tail -1 || true)"
  local start
  start="$(date +%s)"
  if [ -n "$newest" ]; then
    "$bert_trace" train --resume "$newest" --save "$dir" | tee -a "$log"
  else
    "$bert_trace" train "$@" "${common[@]}" --save "$dir" | tee "$log"
  fi
  echo "wall $(( $(date +%s) - start )) s" >> "$log"
}

# Phase 1's first five batches, for the test that repeats its first steps without the corpus:
# the same data options (and any given here), five steps; of each step's dump only the inputs
# are kept.
keep_first_steps() {
  rm -rf "$work/first-steps-run"
  "$bert_trace" train --model "$work/init" --from-config --seed 0 --steps 5 --warmup-steps 5 --batch-size 64 \
    --max-len 64 --file "$corpus/train.txt" --documents --mask-prob 0.3 "$@" --dump-step 1-5 \
    --save "$work/first-steps-run" > /dev/null
  mkdir -p "$out/phase-1"
  local step input
  for step in 1 2 3 4 5; do
    mkdir -p "$out/phase-1/first-steps/step-$step"
    for input in ids token_type_ids attention_mask labels; do
      cp "$work/first-steps-run/step-$step/input.$input.npy" "$out/phase-1/first-steps/step-$step/"
    done
  done
}

# Copies the last phase's model, the logs of every phase before it (PHASE/trainer_state.json)
# and the last one's (trainer_state.json) into out, and writes the facts for RECIPE.md.
#     keep_model phase-1 phase-2 [phase-3 ...]
keep_model() {
  (( $# )) || { echo "keep_model: name the phases, the last one's model is kept" >&2; return 1; }
  local last="${!#}" file phase
  for file in config.json model.safetensors tokenizer.json tokenizer_config.json vocab.txt trainer_state.json; do
    cp "$work/$last/$file" "$out/$file"
  done
  for phase in "${@:1:$#-1}"; do
    mkdir -p "$out/$phase"
    cp "$work/$phase/trainer_state.json" "$out/$phase/trainer_state.json"
  done
  cp "$corpus/heldout-sample.txt" "$out/heldout-sample.txt"
  # The wall time of each phase: the sum of its runs (a resumed phase has several).
  wall() { awk '/^wall/ { s += $2 } END { print s " s" }' "$1"; }
  {
    echo "corpus: $(tr '\n' ' ' < "$corpus/SHA256SUMS")"
    echo "commit: $(git rev-parse HEAD)"
    for phase in "$@"; do
      echo "$phase: $(wall "$work/$phase.log")"
    done
  } > "$work/provenance.txt"
  echo "$out written; the facts for RECIPE.md are in $work/provenance.txt" >&2
}
