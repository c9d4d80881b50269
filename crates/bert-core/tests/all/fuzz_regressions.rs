//! What the fuzz targets in `fuzz/` found, kept as tests, and property tests that keep random
//! mutations of golden/tiny's files going through the same readers in the normal test suite.
//!
//! Each case of [`CASES`] is an input that made a reader panic or allocate what the file only
//! claimed to hold (or, marked `probe`, one that checks the same limit from another side). Every
//! one must now be an `Err` whose message names the file and says what is wrong. A new finding
//! goes into the table: the reader it reaches, its bytes, and the words its error must contain.
//!
//! The property tests run a few hundred mutations each (a few seconds in all); a failure prints
//! the mutated input, which then becomes a case here.

use std::path::{Path, PathBuf};

use bert_core::io::dump::{read_manifest, Dump};
use bert_core::io::tokenizer::BertTokenizer;
use bert_core::io::weights::{Storage, WeightStore};
use bert_core::{BertConfig, BertError, BertModel};
use proptest::prelude::*;
use proptest::sample::Index;

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../golden/tiny")
}

fn golden_dump() -> PathBuf {
    tiny().join("dumps/mask")
}

fn tokenizer() -> BertTokenizer {
    let dir = tiny();
    let vocab = std::fs::read(dir.join("vocab.txt")).unwrap();
    let config = std::fs::read(dir.join("tokenizer_config.json")).unwrap();
    BertTokenizer::from_vocab(&vocab, Some(&config), &dir.join("vocab.txt")).unwrap()
}

fn tiny_config() -> BertConfig {
    BertConfig::from_file(&tiny().join("config.json")).unwrap()
}

/// The reader a case goes through.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// `BertConfig::from_json`.
    Config,
    /// `WeightStore::new`, then `BertModel::assemble` with golden/tiny's config and tokenizer.
    Safetensors,
    /// `dump::read_manifest` of a `manifest.json` holding the bytes.
    Manifest,
    /// `Dump::read` of this stage's `.npy`, holding the bytes, under golden/tiny/dumps/mask's
    /// manifest.
    Npy(&'static str),
}

struct Case {
    name: &'static str,
    /// `fuzz:<target>` with the artifact's name, or `probe` for a case written by hand.
    found_by: &'static str,
    reader: Reader,
    bytes: Vec<u8>,
    /// Words the error message must contain.
    expect: &'static [&'static str],
}

/// The bytes written in `text` as hexadecimal digits.
fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

/// A .npy file: the header dictionary `dict`, padded as numpy pads it, then `data`.
fn npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let len_bytes = if version == 1 { 2 } else { 4 };
    let unpadded = 6 + 2 + len_bytes + dict.len() + 1;
    let mut header = dict.as_bytes().to_vec();
    header.resize(dict.len() + (64 - unpadded % 64) % 64, b' ');
    header.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((header.len() as u16).to_le_bytes());
    } else {
        out.extend((header.len() as u32).to_le_bytes());
    }
    out.extend(header);
    out.extend(data);
    out
}

/// A .npy file whose length field claims `claimed` header bytes, followed by a little text.
fn npy_claiming_header(version: u8, claimed: u32) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    out.extend(claimed.to_le_bytes());
    out.extend(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 32), }\n");
    out
}

/// A safetensors file of `header` (JSON text) and `data`.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn cases() -> Vec<Case> {
    vec![
        // The `dump` target's first finding (its 104,157th input, 77 s in): a format-3 .npy
        // whose header length field says 0xffff0076. ndarray-npy allocated those 4 GiB for the
        // header before reading any of it. These are the artifact's bytes, less the target's
        // mode byte (0x4f: stage 36, pooler.dense).
        Case {
            name: "npy header length of 4 GiB (artifact)",
            found_by: "fuzz:dump oom-3f8961ed04184e0d39d7e834fedfb75d05fa9604",
            reader: Reader::Npy("pooler.dense"),
            bytes: hex(concat!(
                "934e554d505903007600ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
                "ffffffffffffffffffffffffffffffffffffffffffffffffffffffff7b2764657363746f7263686e",
                "6631272c2064657363746f7263686e6631272c2027666f727432616e5f6f72273a2028312c203332",
                "292c207d2020000027666f727432616e5f6f72273a2028312c203332292c207d2020000000000000",
                "f7aebfa19fdd7354727565733ee1a1ff3f",
            )),
            expect: &["pooler.dense.npy", "header claims to be 4294901890 bytes long", "the file has 177"],
        },
        // The `dump` target's second finding (after 7.59 million inputs over three runs): a
        // .npy header of 118 bytes nesting 25 brackets. ndarray-npy's header grammar backtracks
        // at every level, so reading it took over 10 seconds (and a few more brackets, hours).
        // These are the artifact's bytes, less the mode byte (0x4f: pooler.dense again).
        Case {
            name: "npy header nesting 25 brackets (artifact)",
            found_by: "fuzz:dump timeout-28c927a4a12a11a112684b27aaa07ee25ec4d816",
            reader: Reader::Npy("pooler.dense"),
            bytes: hex(concat!(
                "934e554d5059010076007b276465736172273a7b276465273a7b22666c6f617430397065223a205b",
                "312c2031335d2c20226474797065223a2022696e743634222c7b5b5b5b5b5b5b5b5b5b5b5b5b5b5b",
                "5b5b5b5b5b5b5b5b5b5b5b2268662220322020202820222020202020202020202020202020202020",
                "2020200d2020200a204921c08002509659013f",
            )),
            expect: &["pooler.dense.npy", "nests brackets deeper than a .npy header of plain values does"],
        },
        Case {
            name: "npy header nesting 200 square brackets in its shape",
            found_by: "probe",
            reader: Reader::Npy("pooler.dense"),
            bytes: npy(
                1,
                &format!(
                    "{{'descr': '<f4', 'fortran_order': False, 'shape': {}1{}, }}",
                    "[".repeat(200),
                    "]".repeat(200)
                ),
                &[0; 128],
            ),
            expect: &["pooler.dense.npy", "nests brackets deeper"],
        },
        Case {
            name: "npy format 2 header length of u32::MAX",
            found_by: "probe",
            reader: Reader::Npy("pooler.dense"),
            bytes: npy_claiming_header(2, u32::MAX),
            expect: &["pooler.dense.npy", "header claims to be 4294967307 bytes long"],
        },
        Case {
            name: "npy format 1 header longer than the file",
            found_by: "probe",
            reader: Reader::Npy("pooler.dense"),
            bytes: {
                let mut bytes = npy_claiming_header(1, 0);
                bytes[8..10].copy_from_slice(&60_000u16.to_le_bytes());
                bytes
            },
            expect: &["header claims to be 60010 bytes long"],
        },
        // The same bug class one step later, found by reading ndarray-npy after the finding
        // above: a well-formed header whose shape claims more data than follows. ndarray-npy
        // allocates the whole array (here 104 TiB) before reading; the allocation fails and the
        // process aborts. Confirmed with the pre-fix `dump` binary (ASan: "requested allocation
        // size 0x680000000000 exceeds maximum supported size").
        Case {
            name: "npy int64 shape of 2^40 x 13",
            found_by: "probe (pre-fix dump target: abort)",
            reader: Reader::Npy("input.ids"),
            bytes: npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1099511627776, 13), }", &[0; 104]),
            expect: &["input.ids.npy", "claims shape [1099511627776, 13]", "104 bytes after the header"],
        },
        Case {
            name: "npy float32 shape of 52 GB",
            found_by: "probe (pre-fix dump target: out of memory)",
            reader: Reader::Npy("embeddings.word"),
            bytes: npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 13, 1000000000), }", &[0; 16]),
            expect: &["embeddings.word.npy", "claims shape [1, 13, 1000000000]"],
        },
        Case {
            name: "npy shape whose byte count overflows u64",
            found_by: "probe",
            reader: Reader::Npy("embeddings.word"),
            bytes: npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", &[]),
            expect: &["claims shape [4611686018427387904, 4]"],
        },
        Case {
            name: "npy the right shape with its data cut short",
            found_by: "probe",
            reader: Reader::Npy("pooler.dense"),
            bytes: npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 32), }", &[0; 100]),
            expect: &["claims shape [1, 32]", "100 bytes after the header"],
        },
        Case {
            name: "npy with no magic string",
            found_by: "probe",
            reader: Reader::Npy("pooler.dense"),
            bytes: b"NUMPY".to_vec(),
            expect: &["pooler.dense.npy", "not a .npy file"],
        },
        // WeightStore must refuse a header's claims before anything is allocated for them.
        Case {
            name: "safetensors header length beyond the file",
            found_by: "probe",
            reader: Reader::Safetensors,
            bytes: {
                let mut bytes = safetensors("{}", &[]);
                bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                bytes
            },
            expect: &["not a valid safetensors file", "header claims 18446744073709551615 bytes"],
        },
        Case {
            name: "safetensors shape whose element count overflows",
            found_by: "probe",
            reader: Reader::Safetensors,
            bytes: safetensors(
                r#"{"bert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,0]}}"#,
                &[],
            ),
            expect: &["not a valid safetensors file"],
        },
        Case {
            name: "safetensors shape of 2^40 x 32 with no data",
            found_by: "probe",
            reader: Reader::Safetensors,
            bytes: safetensors(
                r#"{"bert.embeddings.word_embeddings.weight":{"dtype":"F16","shape":[1099511627776,32],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
            expect: &["not a valid safetensors file"],
        },
        Case {
            name: "safetensors zero-sized tensor of a huge width",
            found_by: "probe",
            reader: Reader::Safetensors,
            bytes: safetensors(
                r#"{"bert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}}"#,
                &[],
            ),
            expect: &["word_embeddings.weight", "has shape [0, 4611686018427387904], expected [245, 32]"],
        },
        Case {
            name: "config sizes at usize::MAX",
            found_by: "probe",
            reader: Reader::Config,
            bytes: br#"{"hidden_size": 18446744073709551615, "num_hidden_layers": 1, "num_attention_heads": 1,
                "intermediate_size": 1, "vocab_size": 1, "max_position_embeddings": 1}"#
                .to_vec(),
            expect: &["hidden_size is 18446744073709551615, more than the 65536"],
        },
        Case {
            name: "config not UTF-8 after a mistyped value",
            found_by: "probe",
            reader: Reader::Config,
            bytes: b"{\"hidden_size\": \"\xff\xfe\"}".to_vec(),
            expect: &["not a valid BERT config.json"],
        },
        Case {
            name: "manifest naming a file outside the dump",
            found_by: "probe",
            reader: Reader::Manifest,
            bytes: br#"{"format": "bert-trace-dump/1", "producer": null, "model": "m",
                "inputs": {"texts": [], "pair": null},
                "stages": [{"name": "input.ids", "shape": [1], "dtype": "int64", "file": ".."}]}"#
                .to_vec(),
            expect: &["names file `..`, which is not a file in the dump directory"],
        },
    ]
}

/// Runs `bytes` through `reader`; the error's message, or None when the input was accepted.
fn run(reader: Reader, bytes: &[u8]) -> Option<String> {
    let error: BertError = match reader {
        Reader::Config => BertConfig::from_json(bytes, Path::new("case/config.json")).err()?,
        Reader::Safetensors => load_weights(bytes).err()?,
        Reader::Manifest => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("manifest.json");
            std::fs::write(&path, bytes).unwrap();
            read_manifest(&path).err()?
        }
        Reader::Npy(stage) => read_stage(stage, bytes).err()?,
    };
    Some(error.to_string())
}

/// The loader as `BertModel::from_bytes` runs it, with golden/tiny's config and tokenizer.
fn load_weights(bytes: &[u8]) -> bert_core::Result<BertModel> {
    let path = Path::new("case/model.safetensors");
    let store = WeightStore::new(path, Storage::Owned(bytes.to_vec()))?;
    let model = BertModel::assemble(tiny_config(), &store, tokenizer(), PathBuf::from("case"))?;
    for param in [
        &model.embeddings.word_embeddings,
        &model.embeddings.position_embeddings,
        &model.embeddings.token_type_embeddings,
    ] {
        assert_eq!(param.as_slice().len(), param.shape().iter().product::<usize>());
    }
    Ok(model)
}

/// `Dump::read` of `stage`, its file replaced by `bytes`, under the golden manifest.
fn read_stage(stage: &str, bytes: &[u8]) -> bert_core::Result<bert_core::pass::Tensor> {
    let golden = Dump::open(&golden_dump()).unwrap();
    let entry = golden.entry(stage).unwrap_or_else(|| panic!("no stage {stage}")).clone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(&entry.file), bytes).unwrap();
    let dump = Dump::with_manifest(dir.path(), golden.manifest)?;
    dump.read(&entry)
}

#[test]
fn every_case_is_an_error_that_says_why() {
    let mut failures = Vec::new();
    for case in cases() {
        let result = std::panic::catch_unwind(|| run(case.reader, &case.bytes));
        match result {
            Err(_) => failures.push(format!("{} ({}): panicked", case.name, case.found_by)),
            Ok(None) => failures.push(format!("{} ({}): was accepted", case.name, case.found_by)),
            Ok(Some(message)) => {
                for needle in case.expect {
                    if !message.contains(needle) {
                        failures.push(format!("{}: expected `{needle}` in: {message}", case.name));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn golden_files_pass_every_reader() {
    let dir = tiny();
    assert_eq!(run(Reader::Config, &std::fs::read(dir.join("config.json")).unwrap()), None);
    assert_eq!(run(Reader::Safetensors, &std::fs::read(dir.join("model.safetensors")).unwrap()), None);
    assert_eq!(run(Reader::Manifest, &std::fs::read(golden_dump().join("manifest.json")).unwrap()), None);
    for stage in ["input.ids", "embeddings.word", "pooler.dense"] {
        let bytes = std::fs::read(golden_dump().join(format!("{stage}.npy"))).unwrap();
        assert_eq!(run(Reader::Npy(stage), &bytes), None, "{stage}");
    }
}

// ---------------------------------------------------------------------------------------------
// Random mutations

/// One edit of a file's bytes. Positions are fractions of the current length ([`Index`]), and
/// most of them fall in the first `focus` bytes, where the header is.
#[derive(Clone, Debug)]
enum Mutation {
    Set {
        at: Index,
        in_focus: bool,
        byte: u8,
    },
    Insert {
        at: Index,
        in_focus: bool,
        bytes: Vec<u8>,
    },
    Remove {
        at: Index,
        in_focus: bool,
        len: usize,
    },
    /// Replaces the run of digits around `at` (if any) with a number chosen to overflow.
    Number {
        at: Index,
        value: &'static str,
    },
    Truncate {
        at: Index,
    },
}

/// Bytes that matter to JSON and to numpy's header syntax, and any byte at all.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => proptest::sample::select(b"0123456789-+.eE[](){}\",:' \nFTU".to_vec()),
        1 => any::<u8>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let numbers = vec![
        "0",
        "1",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "4611686018427387904",
        "1099511627776",
        "-1",
        "1e999",
    ];
    prop_oneof![
        4 => (any::<Index>(), proptest::bool::weighted(0.8), byte())
            .prop_map(|(at, in_focus, byte)| Mutation::Set { at, in_focus, byte }),
        1 => (any::<Index>(), proptest::bool::weighted(0.8), proptest::collection::vec(byte(), 1..8))
            .prop_map(|(at, in_focus, bytes)| Mutation::Insert { at, in_focus, bytes }),
        1 => (any::<Index>(), proptest::bool::weighted(0.8), 1usize..16)
            .prop_map(|(at, in_focus, len)| Mutation::Remove { at, in_focus, len }),
        3 => (any::<Index>(), proptest::sample::select(numbers))
            .prop_map(|(at, value)| Mutation::Number { at, value }),
        1 => any::<Index>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// `bytes` with `mutations` applied; `focus` is the length of the header.
fn mutate(mut bytes: Vec<u8>, focus: usize, mutations: &[Mutation]) -> Vec<u8> {
    let place = |at: &Index, in_focus: bool, len: usize| {
        let range = if in_focus { focus.min(len) } else { len };
        at.index(range.max(1)).min(len)
    };
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Set { at, in_focus, byte } => {
                if len > 0 {
                    let i = place(at, *in_focus, len).min(len - 1);
                    bytes[i] = *byte;
                }
            }
            Mutation::Insert { at, in_focus, bytes: new } => {
                let i = place(at, *in_focus, len);
                bytes.splice(i..i, new.iter().copied());
            }
            Mutation::Remove { at, in_focus, len: n } => {
                let i = place(at, *in_focus, len);
                bytes.drain(i..(i + n).min(len));
            }
            Mutation::Number { at, value } => {
                let i = place(at, true, len);
                let is_digit = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_digit);
                if is_digit(i) {
                    let start = (0..=i).rev().take_while(|&j| is_digit(j)).last().unwrap();
                    let end = (i..len).take_while(|&j| is_digit(j)).last().unwrap() + 1;
                    bytes.splice(start..end, value.bytes());
                }
            }
            Mutation::Truncate { at } => bytes.truncate(at.index(len.max(1))),
        }
    }
    bytes
}

/// golden/tiny's files, read once.
struct Golden {
    config: Vec<u8>,
    weights: Vec<u8>,
    /// 8 + the header's length.
    weights_header: usize,
    npy: Vec<(&'static str, Vec<u8>)>,
}

fn golden() -> &'static Golden {
    static GOLDEN: std::sync::OnceLock<Golden> = std::sync::OnceLock::new();
    GOLDEN.get_or_init(|| {
        let weights = std::fs::read(tiny().join("model.safetensors")).unwrap();
        let weights_header = 8 + u64::from_le_bytes(weights[..8].try_into().unwrap()) as usize;
        Golden {
            config: std::fs::read(tiny().join("config.json")).unwrap(),
            weights,
            weights_header,
            npy: ["input.ids", "input.attention_mask", "embeddings.word", "layer0.attention.scores"]
                .into_iter()
                .map(|stage| (stage, std::fs::read(golden_dump().join(format!("{stage}.npy"))).unwrap()))
                .collect(),
        }
    })
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // A failure is recorded in fuzz_regressions.proptest-regressions beside this file (commit
        // it), replayed first on every later run; once understood, its input also belongs in
        // `cases()`, where it says what it tests.
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn mutated_config_json_is_parsed_or_refused(mutations in proptest::collection::vec(mutation(), 1..6)) {
        let golden = golden();
        let bytes = mutate(golden.config.clone(), golden.config.len(), &mutations);
        if let Ok(config) = BertConfig::from_json(&bytes, Path::new("mutated/config.json")) {
            prop_assert_eq!(config.head_size() * config.num_attention_heads, config.hidden_size);
            let _ = config.activation();
        }
    }

    #[test]
    fn mutated_npy_is_read_or_refused(
        stage in 0usize..4,
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let (name, original) = &golden().npy[stage];
        // The header is the first 128 bytes of every golden file.
        let bytes = mutate(original.clone(), 128, &mutations);
        if let Ok(tensor) = read_stage(name, &bytes) {
            let golden = Dump::open(&golden_dump()).unwrap();
            prop_assert_eq!(tensor.shape(), golden.entry(name).unwrap().shape.as_slice());
        }
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn mutated_safetensors_is_loaded_or_refused(mutations in proptest::collection::vec(mutation(), 1..5)) {
        let golden = golden();
        let bytes = mutate(golden.weights.clone(), golden.weights_header, &mutations);
        if let Err(e) = load_weights(&bytes) {
            prop_assert!(e.to_string().starts_with("case/"), "{}", e);
        }
    }
}
