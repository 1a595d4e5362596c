//! pen_search through the real binary, at the default limits: each limit is hit at its real
//! number once, and every printed result fits the cap.

use super::common::{ToolRun, pen_tool};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

const MIB: usize = 1024 * 1024;

/// Writes `files` (path, content) under `root`, creating folders as needed.
fn write_files(root: &Path, files: &[(&str, &[u8])]) {
    for (path, content) in files {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
}

/// Runs pen_search and returns the parsed result, failing on an error result.
fn search(root: &Path, args: Value, extra: &[&str]) -> Value {
    let run = pen_tool(root, "pen_search", &args, extra);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    run.json()
}

fn error(run: &ToolRun) -> (String, String) {
    assert_eq!(run.code, 1, "{}", run.stdout);
    let error = &run.json()["error"];
    (
        error["code"].as_str().unwrap().to_string(),
        error["message"].as_str().unwrap().to_string(),
    )
}

/// (path, line) of each match.
fn places(result: &Value) -> Vec<(String, u64)> {
    result["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_string(),
                m["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn place(path: &str, line: u64) -> (String, u64) {
    (path.to_string(), line)
}

#[test]
fn the_query_is_literal() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[(
            "a.txt",
            b"a.b(c)*[d]\nab(c)[d]\naxb(c)*[d]\nabcc[d]\n  a.b(c)*[d] again\n",
        )],
    );
    let result = search(dir.path(), json!({"query": "a.b(c)*[d]"}), &[]);
    assert_eq!(places(&result), vec![place("a.txt", 1), place("a.txt", 5)]);
    assert_eq!(result["matches"][1]["column"], 3);
    assert_eq!(result["matches"][1]["excerpt"], "  a.b(c)*[d] again");
    assert_eq!(result["truncated"], false);
}

#[test]
fn case_sensitivity_works_both_ways_for_non_ascii() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &[("f.txt", "äpfel\nÄPFEL\nÄpfel\n".as_bytes())]);
    let exact = search(dir.path(), json!({"query": "ÄPFEL"}), &[]);
    assert_eq!(places(&exact), vec![place("f.txt", 2)]);
    let caseless = search(
        dir.path(),
        json!({"query": "ÄPFEL", "case_sensitive": false}),
        &[],
    );
    assert_eq!(
        places(&caseless),
        vec![place("f.txt", 1), place("f.txt", 2), place("f.txt", 3)]
    );
}

#[test]
fn globs_filter_by_file_name_and_by_path() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[
            ("main.rs", b"hit"),
            ("src/lib.rs", b"hit"),
            ("src/ui/app.ts", b"hit"),
            ("src/app.ts", b"hit"),
            ("web/app.ts", b"hit"),
        ],
    );
    let rs = search(dir.path(), json!({"query": "hit", "glob": "*.rs"}), &[]);
    assert_eq!(
        places(&rs),
        vec![place("main.rs", 1), place("src/lib.rs", 1)]
    );
    let ts = search(
        dir.path(),
        json!({"query": "hit", "glob": "src/**/*.ts"}),
        &[],
    );
    assert_eq!(
        places(&ts),
        vec![place("src/app.ts", 1), place("src/ui/app.ts", 1)]
    );
}

#[test]
fn path_narrows_the_search_to_a_sub_folder() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[
            ("src/a.rs", b"hit"),
            ("tests/a.rs", b"hit"),
            ("a.rs", b"hit"),
        ],
    );
    let result = search(dir.path(), json!({"query": "hit", "path": "src"}), &[]);
    assert_eq!(places(&result), vec![place("src/a.rs", 1)]);
    let file = search(dir.path(), json!({"query": "hit", "path": "a.rs"}), &[]);
    assert_eq!(places(&file), vec![place("a.rs", 1)]);
}

#[test]
fn errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &[("a.txt", b"x")]);
    let cases = [
        (json!({"query": ""}), "invalid_arguments", "`query`"),
        (
            json!({"query": "x", "glob": "[z"}),
            "invalid_arguments",
            "`glob`",
        ),
        (
            json!({"query": "x", "path": "missing"}),
            "not_found",
            "missing",
        ),
        (
            json!({"query": "x", "path": "../"}),
            "outside_workspace",
            "outside",
        ),
        (
            json!({"query": "x", "after": "bogus"}),
            "bad_cursor",
            "next_after",
        ),
    ];
    for (args, code, needle) in cases {
        let (got_code, message) = error(&pen_tool(dir.path(), "pen_search", &args, &[]));
        assert_eq!(got_code, code, "{args}");
        assert!(message.contains(needle), "{args}: {message}");
    }
}

#[test]
fn entries_limit_is_10_000() {
    let dir = tempfile::tempdir().unwrap();
    // Empty folders are entries but not files, so only the entry limit can stop this walk.
    for i in 0..10_001 {
        fs::create_dir(dir.path().join(format!("d{i:05}"))).unwrap();
    }
    let result = search(dir.path(), json!({"query": "x"}), &[]);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "entries");
    assert_eq!(result["entries_walked"], 10_000);
    assert_eq!(result["next_after"], "d09999#end");
    let rest = search(
        dir.path(),
        json!({"query": "x", "after": "d09999#end"}),
        &[],
    );
    assert_eq!(rest["truncated"], false);
    assert_eq!(rest["entries_walked"], 1);
}

#[test]
fn files_limit_is_1_000() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..1_001 {
        fs::write(dir.path().join(format!("f{i:04}.txt")), "x\n").unwrap();
    }
    let result = search(dir.path(), json!({"query": "nothing"}), &[]);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "files");
    assert_eq!(result["files_searched"], 1_000);
    assert_eq!(result["next_after"], "f0999.txt#end");
    assert!(
        result["guidance"].as_str().unwrap().contains("`glob`"),
        "{result}"
    );
}

#[test]
fn bytes_limit_is_16_mib() {
    let dir = tempfile::tempdir().unwrap();
    let mebibyte = vec![b'a'; MIB];
    for i in 0..17 {
        fs::write(dir.path().join(format!("f{i:02}")), &mebibyte).unwrap();
    }
    let result = search(dir.path(), json!({"query": "x"}), &[]);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "bytes");
    assert_eq!(result["bytes_read"], 16 * MIB);
    assert_eq!(result["next_after"], "f15#end");
    let rest = search(dir.path(), json!({"query": "x", "after": "f15#end"}), &[]);
    assert_eq!(rest["truncated"], false);
    assert_eq!(rest["bytes_read"], MIB);
}

#[test]
fn a_file_over_16_mib_is_skipped_as_too_large() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("huge"), vec![b'x'; 16 * MIB + 1]).unwrap();
    fs::write(dir.path().join("small"), "x").unwrap();
    let result = search(dir.path(), json!({"query": "x"}), &[]);
    assert_eq!(places(&result), vec![place("small", 1)]);
    assert_eq!(result["skipped"]["too_large"], 1);
    assert_eq!(result["truncated"], false);
}

#[test]
fn depth_limit_is_32() {
    let dir = tempfile::tempdir().unwrap();
    let levels: Vec<String> = (1..=33).map(|i| format!("{i}")).collect();
    // A file 32 levels down is found; one 33 levels down is not.
    let at_32 = format!("{}/f.txt", levels[..31].join("/"));
    let at_33 = format!("{}/f.txt", levels[..32].join("/"));
    write_files(dir.path(), &[(&at_32, b"x"), (&at_33, b"x")]);
    let result = search(dir.path(), json!({"query": "x"}), &[]);
    assert_eq!(places(&result), vec![place(&at_32, 1)]);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "depth");
    assert_eq!(result["skipped"]["too_deep"], 1);
    let deeper = search(dir.path(), json!({"query": "x", "path": "1"}), &[]);
    assert_eq!(places(&deeper).len(), 2);
    assert_eq!(deeper["truncated"], false);
}

#[test]
fn matches_limit_is_100_and_the_cursor_continues() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &[("a.txt", "hit\n".repeat(101).as_bytes())]);
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result).len(), 100);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "matches");
    assert_eq!(result["next_after"], "a.txt#L100");
    let rest = search(
        dir.path(),
        json!({"query": "hit", "after": "a.txt#L100"}),
        &[],
    );
    assert_eq!(places(&rest), vec![place("a.txt", 101)]);
    assert_eq!(rest["truncated"], false);
    assert!(rest.get("next_after").is_none());
}

#[test]
fn result_bytes_limit_at_a_small_cap() {
    let dir = tempfile::tempdir().unwrap();
    let line = format!("{} hit {}\n", "a".repeat(120), "b".repeat(120));
    write_files(dir.path(), &[("a.txt", line.repeat(20).as_bytes())]);
    let run = pen_tool(
        dir.path(),
        "pen_search",
        &json!({"query": "hit"}),
        &["--max-result-bytes", "1024"],
    );
    assert!(run.stdout.len() <= 1_024, "{}", run.stdout.len());
    let result = run.json();
    assert_eq!(result["truncated"], true);
    assert_eq!(result["limit_hit"], "result_bytes");
    let shown = places(&result).len() as u64;
    assert!(shown >= 1);
    assert_eq!(result["next_after"], format!("a.txt#L{shown}"));
}

#[test]
fn binary_and_non_utf8_files_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[
            ("image.png", b"\x89PNG\r\n\x1a\n\0\0hit"),
            ("latin1.txt", b"hit caf\xe9\n"),
            ("ok.txt", b"hit\n"),
        ],
    );
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result), vec![place("ok.txt", 1)]);
    assert_eq!(result["skipped"]["binary"], 1);
    assert_eq!(result["skipped"]["non_utf8"], 1);
}

#[test]
fn gitignore_is_honoured_without_a_git_folder() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[
            (".gitignore", b"*.log\n/generated/\n"),
            ("app.log", b"hit"),
            ("generated/g.rs", b"hit"),
            ("src/generated/kept.rs", b"hit"),
            ("src/.gitignore", b"local.txt\n"),
            ("src/local.txt", b"hit"),
            ("src/debug.log", b"hit"),
        ],
    );
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result), vec![place("src/generated/kept.rs", 1)]);
    let sub = search(dir.path(), json!({"query": "hit", "path": "src"}), &[]);
    assert_eq!(places(&sub), vec![place("src/generated/kept.rs", 1)]);
}

#[test]
fn vcs_and_dependency_folders_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[
            (".git/HEAD", b"hit"),
            ("node_modules/pkg/index.js", b"hit"),
            ("target/debug/build.rs", b"hit"),
            ("web/dist/app.js", b"hit"),
            ("py/__pycache__/m.pyc", b"hit"),
            ("py/.venv/lib.py", b"hit"),
            ("src/main.rs", b"hit"),
        ],
    );
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result), vec![place("src/main.rs", 1)]);
}

#[test]
fn symlinks_are_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    write_files(
        outside.path(),
        &[("secret.txt", b"hit"), ("d/s.txt", b"hit")],
    );
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &[("real/f.txt", b"hit")]);
    let symlink = |target: &Path, name: &str| {
        std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
    };
    symlink(&outside.path().join("secret.txt"), "to_outside_file");
    symlink(&outside.path().join("d"), "to_outside_dir");
    symlink(&dir.path().join("real/f.txt"), "to_inside_file");
    symlink(&dir.path().join("real"), "to_inside_dir");
    symlink(&dir.path().join("missing"), "dangling");
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result), vec![place("real/f.txt", 1)]);
    assert_eq!(result["skipped"]["unreadable"], 0);
}

#[test]
fn output_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..400 {
        let path = format!("d{}/s{}/f{i}.txt", i % 5, i % 3);
        write_files(dir.path(), &[(&path, "hit\n".repeat(i % 4).as_bytes())]);
    }
    let first = pen_tool(dir.path(), "pen_search", &json!({"query": "hit"}), &[]);
    assert_eq!(first.json()["limit_hit"], "matches");
    for _ in 0..3 {
        let again = pen_tool(dir.path(), "pen_search", &json!({"query": "hit"}), &[]);
        assert_eq!(again.stdout, first.stdout);
    }
}

#[test]
fn files_with_private_keys_are_skipped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let key = "notes: secret here\n\
               -----BEGIN OPENSSH PRIVATE KEY-----\n\
               b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQsecretAAAAAAAAAAEAAAAzAAAAC3Nz\n\
               QyNTUxOQAAACBsecretk5YKlXhV3o9sDdm4w8NXAAAAAAAAAAABAgMEBQ==\n\
               -----END OPENSSH PRIVATE KEY-----\n\
               after: secret too\n";
    write_files(dir.path(), &[("deploy/id_ed25519", key.as_bytes())]);
    let result = search(dir.path(), json!({"query": "secret"}), &[]);
    // A file that holds a key is skipped whole, its lines outside the key too: what a search
    // returns must not depend on the key, whatever the query.
    assert!(places(&result).is_empty(), "{result}");
    assert_eq!(result["skipped"]["key_material"], 1);
    let printed = result.to_string();
    assert!(!printed.contains("b3BlbnNzaC1rZXkt"), "{printed}");
    assert!(!printed.contains("QyNTUxOQ"), "{printed}");
}

#[test]
fn every_printed_result_fits_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    // Long lines full of characters JSON escapes, many matches, and long paths.
    let nasty = format!("{}hit{}\n", "\"\\\t\u{1}".repeat(80), "é😀".repeat(60));
    let deep = format!("{}/file.txt", vec!["folder"; 20].join("/"));
    write_files(
        dir.path(),
        &[
            ("a.txt", nasty.repeat(150).as_bytes()),
            (deep.as_str(), nasty.repeat(5).as_bytes()),
            ("b.txt", "hit\n".repeat(500).as_bytes()),
        ],
    );
    for cap in ["1024", "65536"] {
        let mut after: Option<String> = None;
        for _ in 0..1_000 {
            let mut args = json!({"query": "hit"});
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let run = pen_tool(
                dir.path(),
                "pen_search",
                &args,
                &["--max-result-bytes", cap],
            );
            let cap: usize = cap.parse().unwrap();
            assert!(run.stdout.len() <= cap, "{} > {cap}", run.stdout.len());
            assert!(!run.stdout.contains("…[truncated"), "cut by the cap");
            let result = run.json();
            if result["truncated"] == false {
                break;
            }
            after = Some(result["next_after"].as_str().unwrap().to_string());
        }
    }
}

#[test]
fn a_very_long_path_at_the_smallest_cap_is_budget_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("{}/f.txt", vec!["d".repeat(50); 16].join("/"));
    assert!(long.len() > 800);
    write_files(dir.path(), &[(long.as_str(), b"hit")]);
    let run = pen_tool(
        dir.path(),
        "pen_search",
        &json!({"query": "hit"}),
        &["--max-result-bytes", "1024"],
    );
    let (code, message) = error(&run);
    assert_eq!(code, "budget_too_small");
    assert!(message.contains("max_tool_result_bytes"), "{message}");
    // The default cap has room for it.
    let result = search(dir.path(), json!({"query": "hit"}), &[]);
    assert_eq!(places(&result), vec![place(&long, 1)]);
}

#[test]
fn the_catalog_describes_the_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(dir.path(), "pen_search", &json!({}), &[]);
    assert!(error(&run).1.contains("`query`"));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list"])
        .output()
        .unwrap();
    let catalog: Value = serde_json::from_slice(&output.stdout).unwrap();
    let spec = catalog
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "pen_search")
        .unwrap();
    let schema = &spec["input_schema"];
    assert_eq!(schema["required"], json!(["query"]));
    assert_eq!(schema["additionalProperties"], false);
    for field in ["query", "path", "glob", "case_sensitive", "after"] {
        assert!(
            schema["properties"][field]["description"].is_string(),
            "{field}"
        );
    }
    let description = spec["description"].as_str().unwrap();
    assert!(description.contains("Unicode characters"), "{description}");
    assert!(description.contains("next_after"), "{description}");
}

/// A hostile repository's `.gitignore` that is a FIFO (in the searched folder, below it and above
/// it) holds neither pen_search nor pen_find: ignore files are opened non-blocking and read only
/// when they are regular files. Before, both waited forever for a writer.
#[test]
fn a_fifo_named_gitignore_holds_no_search() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::write(root.join("a/b/c/x.txt"), "needle\n").unwrap();
    for fifo in ["a/.gitignore", "a/b/.ignore", "a/b/c/.gitignore"] {
        super::common::make_fifo(&root.join(fifo));
    }
    let runs = [
        ("pen_search", json!({"query": "needle"})),
        ("pen_search", json!({"query": "needle", "path": "a/b"})),
        ("pen_find", json!({"glob": "*.txt"})),
        ("pen_find", json!({"glob": "*.txt", "path": "a/b/c"})),
    ];
    for (tool, args) in runs {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(["tool", tool, &args.to_string(), "--root"])
            .arg(root)
            .env("PEN_CONFIG", "/nonexistent/pen-config.json")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert_eq!(code, 0, "{tool} {args}: {out}");
        assert!(out.contains("a/b/c/x.txt"), "{tool} {args}: {out}");
    }
}
