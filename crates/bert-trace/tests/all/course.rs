//! Two promises of the course that running its blocks cannot check:
//!
//! - the Chinese course writes each fixed term one way: for every term of `GLOSSARY`, no zh
//!   chapter's prose (outside fenced blocks, inline code and link targets) holds one of its
//!   wrong forms, and the glossary table of `walkthrough/zh/README.md` (中英术语对照) lists the
//!   term as `GLOSSARY` does;
//! - every module a `python` block of the walkthrough (or of the README) imports is the standard
//!   library, `bert_trace`, or a package that chapter 0's `pip install` line installs. The test
//!   environment has more packages than that line, so running the blocks cannot show that a
//!   reader who followed chapter 0 would get a `ModuleNotFoundError`.

use std::path::{Path, PathBuf};

use crate::common::root;

/// (the English term, its Chinese form, wrong forms no zh chapter's prose may hold).
///
/// An English wrong form may still stand as the gloss right after the Chinese, inside the
/// full-width parenthesis (`层归一化（LayerNorm）`), and as the name of a gradient in a formula
/// (`d context`, which is `grad.context`); it counts only as a word of its own, so paths and
/// stage names (`golden/tiny`, `layer0.attention.context`) are not prose. Heads and layers are
/// counted from 0, as the tool names them (`layer0.head1` is 第 0 层的头 1): an ordinal such as
/// 第 1 个头 or 第一层 names another one.
const GLOSSARY: &[(&str, &str, &[&str])] = &[
    ("golden", "黄金数据", &["金标准数据", "金标准", "golden"]),
    ("LayerNorm", "层归一化", &["LayerNorm"]),
    ("pooler", "池化层", &["pooler"]),
    ("context", "上下文", &["context"]),
    ("manifest", "清单", &["manifest"]),
    ("mask", "掩码", &["遮盖"]),
    ("the tiny random model", "小型随机模型", &["tiny 随机模型", "tiny 模型"]),
    ("mean pooling", "平均池化", &["均值池化"]),
    ("key bias", "key 的偏置", &["键偏置", "key 偏置"]),
    ("scatter-add", "按索引累加", &[]),
    ("global interpreter lock", "全局解释器锁", &["Python 的锁"]),
    ("ablation", "消融", &[]),
    ("activation patching", "激活修补", &[]),
    ("occlusion", "遮挡", &[]),
    ("hook", "钩子", &[]),
    ("truth", "真值", &[]),
    ("own error", "自身误差", &[]),
    ("warm-up", "预热", &[]),
    ("learning rate", "学习率", &[]),
    ("weight decay", "权重衰减", &[]),
    ("optimizer", "优化器", &[]),
];

/// An ordinal that names a head or a layer other than the one meant: 第 1 个头, 第1个注意力头 or
/// 第二个头 (the tool's head 1 is 头 1), or a layer in Chinese numerals, 第一层 (the tool's
/// layer 0 is 第 0 层).
fn ordinal(line: &str) -> Option<String> {
    const NUMERALS: &str = "零一二三四五六七八九十百两";
    for (at, _) in line.match_indices('第') {
        let rest = &line[at + '第'.len_utf8()..];
        let after_space = rest.trim_start();
        let number: String = after_space.chars().take_while(|c| c.is_ascii_digit() || NUMERALS.contains(*c)).collect();
        if number.is_empty() {
            continue;
        }
        let tail = after_space[number.len()..].trim_start();
        // 第一个层归一化 is the first LayerNorm: a layer's ordinal has no 个.
        let (tail, counted) = match tail.strip_prefix('个') {
            Some(tail) => (tail, true),
            None => (tail, false),
        };
        let tail = tail.strip_prefix("注意力").unwrap_or(tail);
        let chinese_numeral = number.chars().all(|c| NUMERALS.contains(c));
        if tail.starts_with('头') || (chinese_numeral && !counted && tail.starts_with('层')) {
            let end = line.len() - tail.len() + '头'.len_utf8().min(tail.len());
            return Some(line[at..end].to_string());
        }
    }
    None
}

#[test]
fn an_ordinal_head_or_layer_is_found() {
    for wrong in ["第 1 个头", "第1个头", "第二个头", "第 3 个注意力头", "第一层", "第十二层"] {
        assert!(ordinal(&format!("看{wrong}的列")).is_some(), "{wrong}");
    }
    for right in ["头 1", "第 0 层的头 4", "第 5 层", "第 8 到 15 列", "第一次", "第一个层归一化"] {
        assert!(ordinal(&format!("看{right}的列")).is_none(), "{right}");
    }
}

/// The heading of the glossary in `walkthrough/zh/README.md`: its table, and nothing else of
/// that section, is left out of the prose the glossary test reads.
const GLOSSARY_HEADING: &str = "## 中英术语对照";

/// The standard library modules the course's Python blocks may import; a block that needs
/// another adds it here.
const STANDARD_LIBRARY: &[&str] = &[
    "collections",
    "functools",
    "io",
    "itertools",
    "json",
    "math",
    "os",
    "pathlib",
    "re",
    "shutil",
    "struct",
    "subprocess",
    "sys",
    "unicodedata",
];

/// The Markdown files of a directory, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// `line` without its inline code (each `...` span becomes one space) and without the targets
/// of its links (`[text](target)` becomes `[text]`).
fn without_code_and_targets(line: &str) -> String {
    let mut text = String::new();
    for (index, piece) in line.split('`').enumerate() {
        text.push_str(if index % 2 == 0 { piece } else { " " });
    }
    let mut kept = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        kept.push_str(&rest[..at + 1]);
        rest = &rest[at + 2..];
        rest = match rest.find(')') {
            Some(end) => &rest[end + 1..],
            None => "",
        };
    }
    kept.push_str(rest);
    kept
}

/// The prose lines of a zh chapter, numbered from 1: outside fenced blocks, without the first
/// line's `translation-of` comment, inline code and link targets; in the index, without the
/// glossary section.
fn prose(text: &str, is_index: bool) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut in_fence = false;
    let mut in_glossary = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || line.starts_with("<!--") {
            continue;
        }
        if is_index && line.starts_with("## ") {
            in_glossary = line.trim() == GLOSSARY_HEADING;
        }
        if in_glossary {
            continue;
        }
        lines.push((index + 1, without_code_and_targets(line)));
    }
    lines
}

/// A character that continues an English word, a path or a stage name.
fn continues_word(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
}

/// Whether the occurrence of `wrong` at byte `at` of `line` is a wrong form in prose.
fn is_wrong_here(line: &str, at: usize, wrong: &str) -> bool {
    if !wrong.is_ascii() {
        return true;
    }
    let before = &line[..at];
    let after = &line[at + wrong.len()..];
    if continues_word(before.chars().next_back()) || continues_word(after.chars().next()) {
        return false;
    }
    // The gloss after the Chinese form: 层归一化（LayerNorm）.
    if before.ends_with('（') {
        return false;
    }
    // A gradient's name in a formula: d context.
    if let Some(rest) = before.strip_suffix("d ") {
        if !continues_word(rest.chars().next_back()) {
            return false;
        }
    }
    true
}

/// The glossary table's rows: (中文, English) cells.
fn glossary_rows(index: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_glossary = false;
    for line in index.lines() {
        if line.starts_with("## ") {
            in_glossary = line.trim() == GLOSSARY_HEADING;
        }
        if !in_glossary || !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() >= 2 {
            rows.push((cells[0].to_string(), cells[1].to_string()));
        }
    }
    rows
}

#[test]
fn the_zh_course_writes_each_glossary_term_one_way() {
    let zh = root().join("walkthrough/zh");
    let mut failures = Vec::new();
    let mut lines_read = 0;
    for path in markdown_files(&zh) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in prose(&text, name == "README.md") {
            lines_read += 1;
            for (english, chinese, wrong_forms) in GLOSSARY {
                for wrong in *wrong_forms {
                    let mut from = 0;
                    while let Some(found) = line[from..].find(wrong) {
                        let at = from + found;
                        from = at + wrong.len();
                        if is_wrong_here(&line, at, wrong) {
                            failures.push(format!(
                                "walkthrough/zh/{name}:{number}: `{wrong}`: the glossary writes {english} as \
                                 {chinese}\n    {}",
                                line.trim()
                            ));
                        }
                    }
                }
            }
        }
    }
    let index = std::fs::read_to_string(zh.join("README.md")).unwrap();
    let rows = glossary_rows(&index);
    assert!(!rows.is_empty(), "walkthrough/zh/README.md: no table under `{GLOSSARY_HEADING}`");
    for (english, chinese, _) in GLOSSARY {
        match rows.iter().find(|(row_chinese, _)| row_chinese == chinese) {
            None => failures
                .push(format!("walkthrough/zh/README.md: the glossary has no row `| {chinese} | {english} | ... |`")),
            Some((_, en)) if !en.contains(english) => failures.push(format!(
                "walkthrough/zh/README.md: the glossary gives {chinese} as `{en}`; this test as `{english}`"
            )),
            Some(_) => {}
        }
    }
    for path in markdown_files(&zh) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in prose(&text, name == "README.md") {
            if let Some(ordinal) = ordinal(&line) {
                failures.push(format!(
                    "walkthrough/zh/{name}:{number}: `{ordinal}`: heads and layers are counted from 0 as the tool \
                     names them, 头 N and 第 N 层\n    {}",
                    line.trim()
                ));
            }
        }
    }
    println!("{lines_read} lines of zh prose, {} glossary terms checked", GLOSSARY.len());
    assert!(lines_read > 1000, "expected the zh course's prose, read {lines_read} lines");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The packages of chapter 0's install line (the first line with `pip install `), as module
/// names: `pip install numpy safetensors ./python` gives numpy, safetensors and bert_trace.
fn installed_by_chapter_0() -> Vec<String> {
    let setup = std::fs::read_to_string(root().join("walkthrough/00-setup.md")).unwrap();
    let line = setup
        .lines()
        .find_map(|l| l.split_once("pip install ").map(|(_, rest)| rest.to_string()))
        .expect("walkthrough/00-setup.md has a `pip install` line");
    let mut packages = Vec::new();
    for word in line.split_whitespace() {
        if word == "&&" || word == ";" || word == "|" || word.starts_with('#') {
            break;
        }
        if word == "./python" {
            // This repository's Python package, by the module it installs.
            packages.push("bert_trace".into());
        } else if !word.starts_with('-') {
            packages.push(word.to_lowercase().replace('-', "_"));
        }
    }
    packages
}

/// The modules a line of Python imports, by their top-level name: `import a.b, c as d` gives a
/// and c, `from a.b import c` gives a.
fn imports(line: &str) -> Vec<String> {
    let line = line.trim();
    let names: Vec<&str> = if let Some(rest) = line.strip_prefix("import ") {
        rest.split(',').filter_map(|part| part.split_whitespace().next()).collect()
    } else if let Some(rest) = line.strip_prefix("from ") {
        rest.split_whitespace().next().into_iter().collect()
    } else {
        Vec::new()
    };
    names.iter().map(|name| name.split('.').next().unwrap_or_default().to_string()).collect()
}

/// The `python` blocks of a Markdown text: each block's lines.
fn python_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut in_other_fence = false;
    for line in text.lines() {
        let fence = line.strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if !in_other_fence => {
                if info.trim() == "python" {
                    current = Some(Vec::new());
                } else {
                    in_other_fence = true;
                }
            }
            (None, Some(_)) => in_other_fence = false,
            (Some(_), Some(_)) => blocks.push(current.take().expect("open")),
            (Some(block), None) => block.push(line.to_string()),
            (None, None) => {}
        }
    }
    blocks
}

#[test]
fn every_python_import_is_installed_by_chapter_0() {
    let installed = installed_by_chapter_0();
    assert!(!installed.is_empty(), "walkthrough/00-setup.md: its `pip install` line names no package");
    let mut documents = markdown_files(&root().join("walkthrough"));
    documents.push(root().join("README.md"));
    let mut failures = Vec::new();
    let mut checked = 0;
    for path in &documents {
        let text = std::fs::read_to_string(path).unwrap();
        let place = path.strip_prefix(root()).unwrap_or(path).display().to_string();
        for block in python_blocks(&text) {
            let first = block.iter().map(|l| l.trim()).find(|l| !l.is_empty()).unwrap_or_default().to_string();
            for line in &block {
                for module in imports(line) {
                    checked += 1;
                    let known = STANDARD_LIBRARY.contains(&module.as_str())
                        || module == "bert_trace"
                        || installed.contains(&module);
                    if !known {
                        failures.push(format!(
                            "{place}: the python block starting `{first}` imports `{module}`, which is neither the \
                             standard library (STANDARD_LIBRARY in this test), bert_trace, nor installed by \
                             chapter 0's `pip install` line ({})",
                            installed.join(" ")
                        ));
                    }
                }
            }
        }
    }
    println!("{checked} imports checked against the standard library, bert_trace and {}", installed.join(" "));
    assert!(checked > 20, "expected the course's imports, found {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every chapter, English and Chinese, opens and ends with its navigation line: the index, the
/// chapter before it and the chapter after it, each linked by its file.
#[test]
fn every_chapter_opens_and_ends_with_its_neighbours() {
    let mut failures = Vec::new();
    for (dir, previous, next) in [("walkthrough", "previous: ", "next: "), ("walkthrough/zh", "上一章：", "下一章：")]
    {
        let mut chapters: Vec<String> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md") && n.as_bytes()[0].is_ascii_digit())
            .collect();
        chapters.sort();
        assert!(chapters.len() > 20, "{dir}: the chapters");
        for (i, name) in chapters.iter().enumerate() {
            let text = std::fs::read_to_string(root().join(dir).join(name)).unwrap();
            let mut want = vec!["(README.md)".to_string()];
            if i > 0 {
                want.push(format!("{previous}["));
                want.push(format!("]({})", chapters[i - 1]));
            }
            if i + 1 < chapters.len() {
                want.push(format!("{next}["));
                want.push(format!("]({})", chapters[i + 1]));
            }
            let is_nav = |line: &str| want.iter().all(|w| line.contains(w.as_str()));
            if !text.lines().take(6).any(is_nav) {
                failures.push(format!("{dir}/{name}: no navigation line at the top with {want:?}"));
            }
            if !text.lines().rev().find(|l| !l.trim().is_empty()).is_some_and(is_nav) {
                failures.push(format!("{dir}/{name}: the last line is not the navigation line with {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
