//! The `pen tool` command line: exit codes, usage errors and the catalog.

use super::common::pen_tool;
use serde_json::json;
use std::process::Command;

#[test]
fn tool_errors_exit_1_with_a_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "x", "bogus": 1}),
        &[],
    );
    assert_eq!(run.code, 1);
    let error = &run.json()["error"];
    assert_eq!(error["code"], "invalid_arguments");
    assert!(error["message"].as_str().unwrap().contains("`bogus`"));
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(dir.path(), "pen_nope", &json!({}), &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("no tool named `pen_nope`"),
        "{}",
        run.stderr
    );
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({}),
        &["--max-result-bytes", "1023"],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("between 1024 and 1048576"),
        "{}",
        run.stderr
    );
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "pen_read", "{not json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn list_prints_the_catalog() {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let catalog: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pen_search",
            "pen_list",
            "pen_read",
            "pen_tail",
            "pen_create",
            "pen_edit",
            "pen_command"
        ]
    );
    for tool in catalog.as_array().unwrap() {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{tool}");
    }
}

#[test]
fn the_cap_comes_from_the_config_file_then_the_environment_then_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "word ".repeat(20_000)).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "max_tool_result_bytes = 2048\n").unwrap();
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .args(["tool", "pen_read", r#"{"path":"big.txt"}"#, "--root"])
            .arg(dir.path())
            .args(extra)
            .env("PEN_CONFIG", &config)
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES");
        for (k, v) in env {
            command.env(k, v);
        }
        let output = command.output().unwrap();
        (
            output.stdout.len() - 1,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (from_file, _) = run(&[], &[]);
    assert!(from_file <= 2048 && from_file > 1024, "{from_file}");
    let (from_env, _) = run(&[("PEN_MAX_TOOL_RESULT_BYTES", "4096")], &[]);
    assert!(from_env <= 4096 && from_env > 2048, "{from_env}");
    let (from_flag, _) = run(
        &[("PEN_MAX_TOOL_RESULT_BYTES", "4096")],
        &["--max-result-bytes", "1024"],
    );
    assert!(from_flag <= 1024, "{from_flag}");
    // A bad value at boot is reported and the earlier value kept.
    let (kept, stderr) = run(&[("PEN_MAX_TOOL_RESULT_BYTES", "99")], &[]);
    assert_eq!(kept, from_file);
    assert!(stderr.contains("between 1024 and 1048576"), "{stderr}");
}

/// `pen run` for a new user, with no key and no model anywhere: the messages say which variable,
/// flag or key to set, not just "configure one".
fn pen_run_unconfigured(flags: &[&str]) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
    command
        .args(["run", "hi"])
        .args(flags)
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(std::process::Stdio::null());
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "PEN_PROVIDER",
        "PEN_MODEL",
        "PEN_BASE_URL",
        "PEN_API_KEY_ENV",
    ] {
        command.env_remove(name);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn pen_run_with_openai_and_no_key_names_the_variable() {
    let (code, stderr) = pen_run_unconfigured(&["--provider", "openai"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("set OPENAI_API_KEY") && stderr.contains("api_key_env"),
        "{stderr}"
    );
}
