//! The repository stands on its own: no file points outside it, every "SPEC §N" names a section
//! of `docs/spec.md`, and the README and both editors give the same install command.

use std::path::{Path, PathBuf};

/// Where pen's files live, relative to the repository root; build output and installed
/// dependencies are left out by the `.gitignore` files the walk honours.
const CHECKED: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "Cargo.toml",
    ".ci",
    "benches",
    "docs",
    "editors",
    "examples",
    "scripts",
    "src",
    "tests",
];

/// Marks of a reference to something outside the repository: the folder of project documents
/// that once sat beside it, the documents that lived there, and this machine's paths. Spelt in
/// pieces so this file does not match itself.
fn outside_marks() -> Vec<String> {
    [
        ["../", "shared"].concat(),
        ["shared ", "folder"].concat(),
        ["/work", "/"].concat(),
        ["SPEC", ".md"].concat(),
        ["LOCAL-", "MODEL"].concat(),
        ["PEERS", ".md"].concat(),
        ["EDITOR-", "TESTING"].concat(),
        ["STYLE", ".md"].concat(),
        ["ADR-", "0069"].concat(),
        ["seeds", "/"].concat(),
    ]
    .into()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file of the checked paths, with its contents.
fn text_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for top in CHECKED {
        for entry in ignore::WalkBuilder::new(root().join(top))
            .hidden(false)
            .build()
        {
            let entry = entry.expect("walk the repository");
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path().to_path_buf();
            // Images and other binary files cannot hold a reference a reader would follow.
            if let Ok(text) = std::fs::read_to_string(&path) {
                files.push((path, text));
            }
        }
    }
    assert!(
        files.len() > 50,
        "the walk found only {} files",
        files.len()
    );
    files
}

#[test]
fn no_file_refers_to_anything_outside_the_repository() {
    let marks = outside_marks();
    let mut found = Vec::new();
    for (path, text) in text_files() {
        for (number, line) in text.lines().enumerate() {
            for mark in &marks {
                if line.contains(mark.as_str()) {
                    let shown = path.strip_prefix(root()).unwrap_or(&path).display();
                    found.push(format!("{shown}:{}: {mark}: {line}", number + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "references outside the repository (cite docs/spec.md or say it in place):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_spec_citation_names_a_section_of_docs_spec_md() {
    let spec = std::fs::read_to_string(root().join("docs/spec.md")).expect("docs/spec.md");
    let sections: Vec<String> = spec
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|title| title.split('.').next())
        .map(str::to_string)
        .collect();
    let cite = regex::Regex::new(r"SPEC §(\d+)").expect("regex");
    let mut dangling = Vec::new();
    for (path, text) in text_files() {
        for found in cite.captures_iter(&text) {
            if !sections.iter().any(|s| *s == found[1]) {
                let shown = path.strip_prefix(root()).unwrap_or(&path).display();
                dangling.push(format!("{shown}: {}", &found[0]));
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "citations of sections docs/spec.md does not have ({sections:?}):\n{}",
        dangling.join("\n")
    );
}

#[test]
fn the_readme_and_both_editors_give_the_same_install_command() {
    let install = "cargo install --locked --path .";
    for file in [
        "README.md",
        "editors/neovim/lua/pen/health.lua",
        "editors/neovim/doc/pen.txt",
        "editors/vscode/src/daemon.ts",
    ] {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        assert!(text.contains(install), "{file} does not say `{install}`");
    }
}
