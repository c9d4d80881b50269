//! Keeps docs and layout in step with code: every source file opens with a `//!` comment saying
//! what it is, every stage name appears in the walkthrough's index, every chapter is linked from
//! it, every ```rust excerpt of the walkthrough is in the file it cites, every relative link of
//! the documentation leads to a file (and heading) that exists, the model files hold BERT's
//! math and none of the machinery below it, and no two crates name a room alike.

use std::path::{Path, PathBuf};

use bert_core::stage::STAGES;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_source_file_says_what_it_is() {
    let mut files = Vec::new();
    for krate in ["bert-core", "bert-sources", "bert-view", "bert-commands", "bert-trace"] {
        rust_files(&root().join("crates").join(krate).join("src"), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! comment:\n{}", missing.join("\n"));
}

#[test]
fn every_stage_appears_in_the_walkthrough_index() {
    let index = std::fs::read_to_string(root().join("walkthrough/README.md")).expect("walkthrough/README.md");
    let missing: Vec<String> =
        STAGES.iter().map(|s| s.pattern.replace("{i}", "0")).filter(|name| !index.contains(name.as_str())).collect();
    assert!(missing.is_empty(), "stages missing from walkthrough/README.md: {missing:?}");
}

#[test]
fn every_chapter_is_linked_from_the_index() {
    let dir = root().join("walkthrough");
    let index = std::fs::read_to_string(dir.join("README.md")).expect("walkthrough/README.md");
    let unlinked: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && name != "README.md")
        .filter(|name| !index.contains(&format!("({name})")))
        .collect();
    assert!(unlinked.is_empty(), "chapters not linked from walkthrough/README.md: {unlinked:?}");
}

/// The Markdown files a reader follows links through.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "golden/README.md", "fuzz/README.md"]
        .iter()
        .map(|name| root().join(name))
        .collect();
    for dir in ["walkthrough", "walkthrough/zh"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
    }
    docs.sort();
    docs
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces turned into `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with GitHub's `-1`, `-2`
/// suffixes for repeated ones.
fn anchors(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            let base = anchor(line.trim_start_matches('#'));
            let repeats = found.iter().filter(|a| a.as_str() == base || a.starts_with(&format!("{base}-"))).count();
            found.push(if repeats == 0 { base } else { format!("{base}-{repeats}") });
        }
    }
    found
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let mut in_code = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if in_code {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let place = format!("{}:{}", doc.strip_prefix(root()).unwrap_or(&doc).display(), n + 1);
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let path = if file.is_empty() { doc.clone() } else { doc.parent().unwrap().join(file) };
                if !path.exists() {
                    failures.push(format!("{place}: {target}: no such file"));
                } else if !fragment.is_empty() && path.extension().is_some_and(|e| e == "md") {
                    let linked = std::fs::read_to_string(&path).unwrap();
                    if !anchors(&linked).iter().any(|a| a == fragment) {
                        failures.push(format!("{place}: {target}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    println!("{checked} relative links checked");
    assert!(checked >= 100, "expected the documentation's links, found {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What the model files must not contain: the machinery belongs below `ops/`.
const MACHINERY: &[(&str, &str)] = &[
    ("unsafe", "unsafe code"),
    ("threads::", "the thread pool"),
    ("simd::", "vector loops"),
    ("gemm::", "the matrix kernel"),
    ("kernels::", "the kernels"),
    ("elementwise", "the vector loops"),
    ("std::arch", "intrinsics"),
    ("_mm", "intrinsics"),
    ("chunks_exact", "chunk-index arithmetic"),
    ("as_slice_mut", "raw slices"),
    ("as_ptr", "raw pointers"),
    ("for_each_part", "the thread pool"),
];

#[test]
fn the_model_files_are_bert_and_nothing_else() {
    let mut files = Vec::new();
    rust_files(&root().join("crates/bert-core/src/model"), &mut files);
    assert!(files.len() >= 10, "expected the model files in crates/bert-core/src/model, found {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line_idx, line) in text.lines().enumerate() {
            // Doc comments may name the machinery to say where it is.
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (needle, what) in MACHINERY {
                if line.contains(needle) {
                    found.push(format!("{}:{}: {what} (`{needle}`): {}", file.display(), line_idx + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "machinery in the model files:\n{}", found.join("\n"));
}

/// The operations of a formula: recomputing a stage (for isolation and explain) must reach every
/// one of them through the model's own stage functions, never write one itself. `::exp` matches
/// only where no letter, digit or `_` follows (`F::exp` and `.map(F::exp)` are an exponential,
/// `crate::experiments` a module); every other needle anywhere.
const FORMULA: &[&str] =
    &[".exp(", "::exp", "tanh", "sqrt", "softmax", "matmul", "powf", ".dot(", "sum_axis", "cross_entropy", "erf"];

/// Whether `line` holds `needle` as [`FORMULA`] reads it.
fn holds(line: &str, needle: &str) -> bool {
    let word = needle == "::exp";
    line.match_indices(needle)
        .any(|(at, _)| !word || !line[at + needle.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
}

#[test]
fn recomputation_has_no_formula_of_its_own() {
    // (the file, a function it must still have: else this test checks nothing)
    let files = [
        ("crates/bert-core/src/recompute.rs", "fn recompute"),
        ("crates/bert-core/src/divergence/isolate.rs", "fn own_errors"),
    ];
    let mut found = Vec::new();
    for (file, must_have) in files {
        let file = root().join(file);
        let text = std::fs::read_to_string(&file).unwrap();
        for (line_idx, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for needle in FORMULA {
                if holds(line, needle) {
                    found.push(format!("{}:{}: `{needle}`: {}", file.display(), line_idx + 1, line.trim()));
                }
            }
        }
        assert!(text.contains(must_have), "{} has no `{must_have}`: update this test", file.display());
    }
    assert!(found.is_empty(), "a formula written in the recomputation or isolation files:\n{}", found.join("\n"));
}

/// `line` without what its string literals say (a formula printed for the reader, such as
/// `"tanh({x})"`, is not one computed) and without the calls into the library's operations
/// (`ops::softmax_row`): what is left is arithmetic the file does itself.
fn own_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in line.chars() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_string = !in_string,
            (true, false, _) => {}
            (false, _, c) => out.push(c),
        }
    }
    let mut own = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("ops::") {
        own.push_str(&rest[..at]);
        let call = &rest[at + "ops::".len()..];
        rest = &call[call.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(call.len())..];
    }
    own.push_str(rest);
    own
}

#[test]
fn explanations_and_the_page_have_no_formula_of_their_own() {
    // Where explain shows a formula's steps (a row's mean and variance, its max and sum of
    // exponentials, a product's element, the scale), and where the page shows probabilities
    // and how the hidden states change, the numbers come from the library's operations and
    // experiments. (the file or directory, a function it must still have: else this test
    // checks nothing)
    let places =
        [("crates/bert-core/src/explanation", "fn explain"), ("crates/bert-view/src/data.rs", "fn probabilities")];
    let mut found = Vec::new();
    for (place, must_have) in places {
        let place = root().join(place);
        let files: Vec<PathBuf> = match place.is_dir() {
            true => std::fs::read_dir(&place).unwrap().map(|e| e.unwrap().path()).collect(),
            false => vec![place.clone()],
        };
        let mut all = String::new();
        for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            for (line_idx, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                let own = own_code(line);
                for needle in FORMULA {
                    if holds(&own, needle) {
                        found.push(format!("{}:{}: `{needle}`: {}", file.display(), line_idx + 1, line.trim()));
                    }
                }
            }
            all += &text;
        }
        assert!(all.contains(must_have), "{} has no `{must_have}`: update this test", place.display());
    }
    assert!(found.is_empty(), "a formula written in explain or the page's data:\n{}", found.join("\n"));
}

#[test]
fn own_code_drops_strings_and_the_librarys_operations_only() {
    // (line, what is left)
    let cases = [
        (r#"format!("tanh({}) = {}", x, y)"#, "format!(, x, y)"),
        (r#"let e = "a \"quoted\" exp()"; x.exp()"#, "let e = ; x.exp()"),
        ("let s = ops::softmax_row(row); let t = row.sqrt();", "let s = (row); let t = row.sqrt();"),
        ("let m = ops::moments(x, eps)", "let m = (x, eps)"),
    ];
    for (line, want) in cases {
        assert_eq!(own_code(line), want, "{line}");
    }
}

/// `text` with every run of whitespace made one space.
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every ```rust block of the walkthrough is code that is in the file the chapter links just
/// before it (the last link to a `.rs` file above the block), whitespace aside; a line
/// `// ...` marks an elision between pieces, which must appear in that order.
#[test]
fn every_rust_excerpt_is_in_the_file_it_cites() {
    let dir = root().join("walkthrough");
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    let mut checked = 0;
    let mut failures = Vec::new();
    for chapter in &chapters {
        let text = std::fs::read_to_string(chapter).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut cited: Option<String> = None;
        let mut idx = 0;
        while idx < lines.len() {
            let line = lines[idx];
            if line.trim_start().starts_with("```rust") {
                let start = idx + 1;
                let mut end = start;
                while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                    end += 1;
                }
                let place = format!("{}:{}", chapter.display(), start);
                checked += 1;
                match &cited {
                    None => failures.push(format!("{place}: no link to a .rs file before this excerpt")),
                    Some(target) => {
                        let path = dir.join(target);
                        match std::fs::read_to_string(&path) {
                            Err(e) => failures.push(format!("{place}: cites {target}, which cannot be read: {e}")),
                            Ok(source) => {
                                let source = normalised(&source);
                                let mut from = 0;
                                for piece in lines[start..end].split(|l| l.trim() == "// ...") {
                                    let piece = normalised(&piece.join("\n"));
                                    if piece.is_empty() {
                                        continue;
                                    }
                                    match source[from..].find(&piece) {
                                        Some(at) => from += at + piece.len(),
                                        None => failures
                                            .push(format!("{place}: not in {target} (in this order):\n    {piece}")),
                                    }
                                }
                            }
                        }
                    }
                }
                idx = end + 1;
                continue;
            }
            if let Some(target) = rs_link(line) {
                cited = Some(target);
            }
            idx += 1;
        }
    }
    println!("{checked} rust excerpts checked");
    assert!(checked >= 10, "expected the walkthrough's rust excerpts, found {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The last Markdown link to a `.rs` file on `line`: `[text](path.rs)`.
fn rs_link(line: &str) -> Option<String> {
    let mut found = None;
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if target.ends_with(".rs") {
                found = Some(target.to_string());
            }
        }
    }
    found
}

/// The module of bert-core a source file is (`model/attention.rs` is `model::attention`,
/// `model/mod.rs` is `model`).
fn module_of(path: &Path, src: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The modules of bert-core a source file names in its code (`crate::a::b`, `super::c`),
/// outside its tests and comments.
fn imports(text: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or(text)
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let code = code.as_str();
    let mut found = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` of `a/b.rs` is `a`; of `a/b/mod.rs` (module a::b) it is `a` too.
            let mut parent = module.to_vec();
            if !is_mod_file || !parent.is_empty() {
                parent.pop();
            }
            parent
        }),
    ] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: Vec<String> = rest
                .split("::")
                .map(|piece| piece.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
                .take_while(|piece| !piece.is_empty() && piece.chars().next().is_some_and(|c| c.is_lowercase()))
                .collect();
            let mut full = base.clone();
            full.extend(path);
            found.push(full);
        }
    }
    found
}

/// The sources of every crate of the workspace, the Python module's included.
const CRATE_SOURCES: [&str; 6] = [
    "crates/bert-core/src",
    "crates/bert-sources/src",
    "crates/bert-view/src",
    "crates/bert-commands/src",
    "crates/bert-trace/src",
    "python/src",
];

/// Every crate imports in one direction: no two source files import each other, directly or
/// through others, and no two of its folders (`model`, `ops`, `io`, ...) do either. A cycle
/// means neither can be read without the other; plain data types go in a file of their own.
#[test]
fn no_crate_has_import_cycles() {
    let mut failures = Vec::new();
    for crate_src in CRATE_SOURCES {
        failures.extend(import_cycles(&root().join(crate_src)).into_iter().map(|f| format!("{crate_src}: {f}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The import graph of the crate whose sources are `src`: file index -> the file indices it
/// imports (the longest module prefix that is a file), with each file's module.
fn import_graph(src: &Path) -> (Vec<Vec<String>>, Vec<std::collections::BTreeSet<usize>>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: Vec<Vec<String>> = files.iter().map(|f| module_of(f, src)).collect();
    let mut edges: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        let is_mod = file.file_name().is_some_and(|n| n == "mod.rs");
        for path in imports(&text, &modules[i], is_mod) {
            let target = (1..=path.len()).rev().find_map(|n| modules.iter().position(|m| m[..] == path[..n]));
            if let Some(j) = target.filter(|&j| j != i && !modules[i].starts_with(&modules[j])) {
                edges[i].insert(j);
            }
        }
    }
    (modules, edges)
}

/// The cycles of the crate whose sources are `src`, through files and through folders.
fn import_cycles(src: &Path) -> Vec<String> {
    let (modules, edges) = import_graph(src);
    assert!(modules.len() >= 3, "expected the sources of a crate in {}", src.display());
    let name = |i: usize| modules[i].join("::");
    let mut failures = Vec::new();
    // A cycle through files: a path from a file back to itself.
    for start in 0..modules.len() {
        let mut stack = vec![(start, vec![start])];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for &next in &edges[at] {
                if next == start {
                    let cycle: Vec<String> = path.iter().map(|&i| name(i)).collect();
                    failures.push(format!("files: {} -> {}", cycle.join(" -> "), name(start)));
                } else if seen.insert(next) {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push((next, longer));
                }
            }
        }
    }
    // A cycle through folders: two top-level modules that import each other. A file that
    // imports nothing of the crate (plain data, such as the labels of a batch) can be used from
    // anywhere without making one.
    let folder = |i: usize| modules[i].first().cloned().unwrap_or_default();
    let mut folder_edges = std::collections::BTreeSet::new();
    for (i, targets) in edges.iter().enumerate() {
        for &j in targets.iter().filter(|&&j| !edges[j].is_empty()) {
            if folder(i) != folder(j) && !folder(i).is_empty() && !folder(j).is_empty() {
                folder_edges.insert((folder(i), folder(j)));
            }
        }
    }
    for (a, b) in &folder_edges {
        if a < b && folder_edges.contains(&(b.clone(), a.clone())) {
            failures.push(format!("folders: {a} and {b} import each other"));
        }
    }
    failures.sort();
    failures.dedup();
    let imports_between = edges.iter().map(|e| e.len()).sum::<usize>();
    println!(
        "{}: {} files, {imports_between} imports between them, {} between folders",
        src.display(),
        modules.len(),
        folder_edges.len()
    );
    failures
}

/// The fast kernels are machinery below the operations: only `ops/` reaches them, so a stage's
/// formula, a sink or a report never depends on which kernel ran.
#[test]
fn only_the_operations_import_the_kernels() {
    let src = root().join("crates/bert-core/src");
    let (modules, edges) = import_graph(&src);
    let is_kernels = |m: &[String]| m.len() >= 2 && m[0] == "ops" && m[1] == "kernels";
    let mut found = Vec::new();
    for (i, targets) in edges.iter().enumerate() {
        for &j in targets {
            if is_kernels(&modules[j]) && modules[i].first().is_none_or(|f| f != "ops") {
                found.push(format!("{} imports {}", modules[i].join("::"), modules[j].join("::")));
            }
        }
    }
    assert!(found.is_empty(), "outside ops/:\n{}", found.join("\n"));
}

/// The string literals of `code` (outside comments), each with the line it starts on; a literal
/// may span lines. Character literals are skipped, so that `'"'` opens no string.
fn string_literals(code: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let (mut found, mut line, mut k) = (Vec::new(), 1, 0);
    while k < chars.len() {
        match chars[k] {
            '\n' => line += 1,
            '/' if chars.get(k + 1) == Some(&'/') => {
                while k < chars.len() && chars[k] != '\n' {
                    k += 1;
                }
                continue;
            }
            '\'' if chars.get(k + 2) == Some(&'\'') => k += 2,
            '\'' if chars.get(k + 1) == Some(&'\\') && chars.get(k + 3) == Some(&'\'') => k += 3,
            '"' => {
                let start = line;
                let mut literal = String::new();
                k += 1;
                while k < chars.len() && chars[k] != '"' {
                    // A backslash at a line's end joins it to the next, without its indent.
                    if chars[k] == '\\' && chars.get(k + 1) == Some(&'\n') {
                        line += 1;
                        k += 2;
                        while chars.get(k).is_some_and(|c| c.is_whitespace()) {
                            line += usize::from(chars[k] == '\n');
                            k += 1;
                        }
                        continue;
                    }
                    if chars[k] == '\\' {
                        literal.push(chars[k]);
                        k += 1;
                    }
                    if chars.get(k) == Some(&'\n') {
                        line += 1;
                    }
                    if let Some(&c) = chars.get(k) {
                        literal.push(c);
                    }
                    k += 1;
                }
                found.push((start, literal));
            }
            _ => {}
        }
        k += 1;
    }
    found
}

/// The library serves the command line and Python alike, so no message of it spells an option
/// as one of them does (`--mask-prob`): it writes `‹mask_prob›` and each caller renders it
/// (`bert_core::words`). The binary and the Python package are where flags and keywords live.
#[test]
fn the_libraries_name_no_command_line_flag() {
    let mut found = Vec::new();
    for dir in ["crates/bert-core/src", "crates/bert-sources/src", "crates/bert-view/src", "crates/bert-commands/src"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            // Tests of the rendering itself spell flags on purpose.
            let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
            for (line, literal) in string_literals(code) {
                let bytes = literal.as_bytes();
                let flag = (0..bytes.len()).any(|k| {
                    bytes[k..].starts_with(b"--")
                        && bytes.get(k + 2).is_some_and(|c| c.is_ascii_lowercase())
                        && (k == 0 || !bytes[k - 1].is_ascii_alphanumeric())
                        // The options of our Python scripts are theirs to spell.
                        && !literal[..k].ends_with(".py ")
                });
                if flag {
                    found.push(format!("{}:{line}: \"{}\"", file.display(), literal.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "a library message spells a command-line flag:\n{}", found.join("\n"));
}

/// The page's data and pictures name stages through the stage table (`Stage::name`, a row's
/// pattern), never by a literal of their own: a renamed stage would otherwise leave the page
/// looking for a file no dump has. A literal that is a dotted stage name (`input.ids`; `loss`
/// alone is also a word, a key of the heads' report), or holds a per-layer row's pattern
/// (`layer{i}.attention.probs`), is one; a message that mentions a stage in its prose is not.
/// Checked on planted literals first, so that the check is known to see one.
#[test]
fn the_view_names_stages_only_through_the_table() {
    let names_a_stage = |literal: &str| {
        (literal.contains('.') && bert_core::stage::parse(literal).is_some())
            || bert_core::stage::STAGES.iter().any(|row| row.pattern.contains("{i}") && literal.contains(row.pattern))
    };
    assert!(names_a_stage("layer0.attention.probs") && names_a_stage("input.ids"));
    assert!(names_a_stage("layer{i}.attention.probs") && !names_a_stage("the dump has no input.ids"));
    let mut files = Vec::new();
    rust_files(&root().join("crates/bert-commands/src/view"), &mut files);
    rust_files(&root().join("crates/bert-view/src"), &mut files);
    assert!(files.len() > 3, "the view's files: {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
        for (line, literal) in string_literals(code) {
            if names_a_stage(&literal) {
                found.push(format!("{}:{line}: \"{literal}\"", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "a stage named by a literal of the view's own:\n{}", found.join("\n"));
}

/// The rooms of the crate whose sources are `src`: every folder and every file (without `.rs`;
/// `mod.rs`, `lib.rs` and `main.rs` are their folder), as name -> the paths that have it.
fn rooms(src: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let stem = parts.pop().unwrap().trim_end_matches(".rs").to_string();
        if !["mod", "lib", "main"].contains(&stem.as_str()) {
            parts.push(stem);
        }
        for depth in 0..parts.len() {
            let path = parts[..=depth].join("/");
            let paths = found.entry(parts[depth].clone()).or_default();
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    found
}

/// A name says which layer a room is in: bert-core names its rooms for the work (`divergence`,
/// `training`, `token_importance`), bert-commands as the commands are typed (`diff`, `train`,
/// `attribute`), and the binary keeps its file per command under `cli/` (the command line of
/// the command of that name). So no two crates have a room of the same name, apart from each
/// crate's `error` (its own error type), and Python's `model` (bert-core's model, loaded once)
/// and `report` (bert-commands' reports as Python objects), which are those rooms' own
/// concepts seen from Python.
#[test]
fn no_two_crates_share_a_room_name() {
    let shared_by_design = ["error", "model", "report"];
    let all: Vec<_> = CRATE_SOURCES.iter().map(|c| (*c, rooms(&root().join(c)))).collect();
    assert!(all[0].1.contains_key("divergence") && all[4].1.contains_key("cli"), "expected the crates' rooms");
    let mut failures = Vec::new();
    for (i, (left, left_rooms)) in all.iter().enumerate() {
        for (right, right_rooms) in &all[i + 1..] {
            for (name, left_paths) in left_rooms {
                let Some(right_paths) = right_rooms.get(name) else { continue };
                let command_line = |paths: &[String]| paths.iter().all(|p| p.starts_with("cli/"));
                if shared_by_design.contains(&name.as_str())
                    || (*left == "crates/bert-commands/src"
                        && *right == "crates/bert-trace/src"
                        && command_line(right_paths))
                {
                    continue;
                }
                failures.push(format!("`{name}`: {left} {left_paths:?} and {right} {right_paths:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "rooms of one name in two crates:\n{}", failures.join("\n"));
}
