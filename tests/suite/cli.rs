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

/// A config path that is not a regular file (`/dev/zero`, a FIFO with no writer, a directory)
/// is refused with a warning naming it, and the command runs with the defaults instead of
/// hanging. The wait is bounded so that a hang fails the test.
#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let root = dir.path().to_string_lossy().into_owned();
    for config in [
        "/dev/zero".to_string(),
        fifo.to_string_lossy().into_owned(),
        root.clone(),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(["tool", "pen_list", "{}", "--root", &root])
            .env("PEN_CONFIG", &config)
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("pen tool hung reading PEN_CONFIG={config}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{config}: {stderr}");
        assert!(
            stderr.contains(&config) && stderr.contains("not a regular file"),
            "{config}: {stderr}"
        );
    }
}

/// A huge `model` (from the config file and from the environment) is refused, naming the key,
/// and not kept; the warnings do not repeat the value.
#[test]
fn a_huge_config_string_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, format!("model = \"{}\"\n", "m".repeat(600 * 1024))).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "pen_list", "{}", "--root"])
        .arg(dir.path())
        .env("PEN_CONFIG", &file)
        .env("PEN_MODEL", "x".repeat(100 * 1024))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("config key `model` is").count(),
        2,
        "{stderr}"
    );
    assert!(stderr.len() < 2_000, "{} bytes of warnings", stderr.len());
}
