//! The store commands. On a closed or failing stdout: a closed pipe ends the output quietly
//! with the command's own exit code, a write error is a message on stderr (also under
//! `--json`) and a non-zero exit, never a panic (exit 101). On a damaged record: `runs` lists
//! the others and names the damaged one. `runs` shows every kind of record with its command,
//! duration and directory, and filters them; every command prints JSON in one style.

use std::fs::File;
use std::process::{Output, Stdio};

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::Sandbox;

/// A store with one record, so every report has content.
fn with_a_run() -> Sandbox {
    let env = Sandbox::new();
    let o = env.run(&["run", "--", "echo", "hello"]);
    assert!(o.status.success(), "{o:?}");
    env
}

/// `agentrun --store STORE ARGS` with this stdout, stderr captured.
fn output(env: &Sandbox, args: &[&str], stdout: impl Into<Stdio>) -> Output {
    let mut c = env.cmd(args);
    c.stdout(stdout).stderr(Stdio::piped()).output().unwrap()
}

const COMMANDS: [&[&str]; 5] = [
    &["verify"],
    &["verify", "--json"],
    &["gc"],
    &["gc", "--json"],
    &["gc", "--dry-run"],
];

#[test]
fn a_full_stdout_is_an_error_message_not_a_panic() {
    let env = with_a_run();
    for args in COMMANDS {
        let o = output(
            &env,
            args,
            File::options().write(true).open("/dev/full").unwrap(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let code = o.status.code();
        assert!(!matches!(code, Some(0 | 101)), "{args:?}: {code:?} {err}");
        // Under --json too: the failure is about stdout, so it cannot be reported there.
        assert!(err.starts_with("agentrun: error: "), "{args:?}: {err}");
        assert!(err.contains("cannot write to stdout"), "{args:?}: {err}");
        assert!(err.contains("No space left"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_full_stdout_under_json_is_reported_on_stderr_by_every_command() {
    let env = with_a_run();
    let stream = format!(
        "{}/../../tests/fixtures/harness/claude/{}",
        env!("CARGO_MANIFEST_DIR"),
        "agentrun-golden-synthetic.jsonl"
    );
    for args in [
        &["run", "--json", "--", "echo", "hi"][..],
        &["runs", "--json"],
        &["config", "--json"],
        &["interpret", "--json", "--harness", "claude", &stream],
    ] {
        let o = output(
            &env,
            args,
            File::options().write(true).open("/dev/full").unwrap(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(
            err.starts_with("agentrun: error: cannot write to stdout: "),
            "{args:?}: {err}"
        );
        assert!(err.contains("No space left"), "{args:?}: {err}");
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = output(&env, args, writer);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!((o.status.code(), &*err), (Some(0), ""), "{args:?}");
    }
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let env = with_a_run();
    for args in COMMANDS {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // the reader is gone before anything is written (`… | true`)
        let o = output(&env, args, writer);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
}

#[test]
fn runs_lists_the_readable_runs_and_names_each_damaged_record() {
    let env = with_a_run();
    let records = env.store.join("records");
    let good = std::fs::read_dir(&records)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let good_id = good.file_stem().unwrap().to_str().unwrap().to_owned();
    // Newer run ids than the good one: a record cut short, and one of a newer format.
    let truncated = format!("{good_id}-1");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(
        records.join(format!("{truncated}.json")),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let future = format!("{good_id}-2");
    std::fs::write(
        records.join(format!("{future}.json")),
        br#"{"format": "agentrun.record.v9"}"#,
    )
    .unwrap();

    for json in [false, true] {
        let args: &[&str] = if json { &["runs", "--json"] } else { &["runs"] };
        let o = output(&env, args, Stdio::piped());
        let stdout = String::from_utf8(o.stdout).unwrap();
        let stderr = String::from_utf8(o.stderr).unwrap();
        assert_eq!(o.status.code(), Some(125), "{stdout}\n{stderr}");
        if json {
            let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            let ids: Vec<&str> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap())
                .collect();
            assert_eq!(ids, [good_id.as_str()], "{stdout}");
            assert_eq!(list[0]["command"][0], "echo");
        } else {
            assert_eq!(stdout.lines().count(), 2, "{stdout}");
            assert!(
                stdout.lines().nth(1).unwrap().starts_with(&good_id),
                "{stdout}"
            );
            assert!(stdout.contains("echo hello"), "{stdout}");
        }
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("agentrun: error:"))
            .collect();
        assert_eq!(errors.len(), 2, "{stderr}");
        assert!(
            errors[0].starts_with(&format!("agentrun: error: cannot list run {future}: "))
                && errors[0].contains("agentrun.record.v9"),
            "{stderr}"
        );
        assert!(
            errors[1].starts_with(&format!("agentrun: error: cannot list run {truncated}: "))
                && errors[1].contains("is corrupt"),
            "{stderr}"
        );
    }

    // Without the damaged records, the same listing succeeds.
    for bad in [&truncated, &future] {
        std::fs::remove_file(records.join(format!("{bad}.json"))).unwrap();
    }
    let o = output(&env, &["runs"], Stdio::piped());
    assert!(o.status.success(), "{o:?}");
}

/// The `runs --json` list.
fn runs_json(env: &Sandbox, filters: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["runs", "--json"];
    args.extend(filters);
    let o = env.run(&args);
    assert!(o.status.success(), "{args:?}: {}", sandbox::stderr(&o));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    list.as_array().unwrap().clone()
}

fn ids(list: &[serde_json::Value]) -> Vec<&str> {
    list.iter().map(|r| r["run_id"].as_str().unwrap()).collect()
}

/// Runs `agentrun run --json ARGS` and returns its run id.
fn run_id(env: &Sandbox, args: &[&str]) -> String {
    let mut all = vec!["run", "--json"];
    all.extend(args);
    let o = env.run(&all);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn run_takes_a_directory_variables_and_a_label_and_runs_lists_and_filters_them() {
    let env = Sandbox::new();
    let dir = env.path("work");
    std::fs::create_dir(&dir).unwrap();
    let dir_text = dir.display().to_string();
    let o = env.run(&[
        "run",
        "--cwd",
        &dir_text,
        "--env",
        "GREETING=hi=there",
        "--label",
        "nightly",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING\"; pwd",
    ]);
    assert!(o.status.success(), "{}", sandbox::stderr(&o));
    let out = sandbox::stdout(&o);
    assert!(out.contains("hi=there\n"), "{out}");
    assert!(out.contains(&format!("{dir_text}\n")), "{out}");
    let labelled = runs_json(&env, &[])[0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let failed = run_id(&env, &["--", "sh", "-c", "exit 3"]);
    let plain = run_id(&env, &["--", "true"]);

    // Every run has its directory, duration and label (or null) in the JSON.
    let all = runs_json(&env, &[]);
    assert_eq!(ids(&all), [&plain, &failed, &labelled]);
    assert_eq!(all[2]["cwd"], dir_text.as_str());
    assert_eq!(all[2]["label"], "nightly");
    assert!(all[2]["duration_ms"].is_u64(), "{}", all[2]);
    assert!(all[0]["label"].is_null(), "{}", all[0]);
    let here = std::env::current_dir().unwrap().display().to_string();
    assert_eq!(all[0]["cwd"], here.as_str(), "the runner's own directory");

    // The filters.
    assert_eq!(ids(&runs_json(&env, &["--label", "nightly"])), [&labelled]);
    assert_eq!(ids(&runs_json(&env, &["--status", "failed"])), [&failed]);
    let either = runs_json(&env, &["--status", "failed", "--status", "succeeded"]);
    assert_eq!(either.len(), 3);
    assert_eq!(
        ids(&runs_json(&env, &["--status", "succeeded", "-n", "1"])),
        [&plain]
    );
    assert!(runs_json(&env, &["--status", "running"]).is_empty());
    assert_eq!(runs_json(&env, &["--since", "1h"]).len(), 3);
    assert_eq!(runs_json(&env, &["--since", "2000-01-01T00:00"]).len(), 3);
    assert!(runs_json(&env, &["--since", "2999-12-31"]).is_empty());
    let o = env.run(&["runs", "--since", "2025-02-30"]);
    sandbox::assert_exit_says(&o, 125, "invalid date");
    let o = env.run(&["runs", "--status", "done"]);
    sandbox::assert_exit_says(&o, 125, "invalid value 'done'");
    let o = env.run(&["runs", "--label", "weekly"]);
    assert!(o.status.success());
    assert_eq!(sandbox::stdout(&o), "");
    assert!(sandbox::stderr(&o).contains("no runs match"), "{o:?}");

    // The table has a duration and a directory for each (under the home directory as `~`).
    let o = env
        .cmd(&["runs"])
        .env("HOME", dir.parent().unwrap())
        .output()
        .unwrap();
    let table = sandbox::stdout(&o);
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header.split("  ").filter(|c| !c.is_empty()).collect();
    let columns: Vec<&str> = columns.iter().map(|c| c.trim()).collect();
    assert_eq!(
        columns,
        [
            "RUN ID",
            "FINISHED (UTC)",
            "DURATION",
            "STATUS",
            "OUTPUT",
            "CWD",
            "COMMAND"
        ],
        "{table}"
    );
    let row = table.lines().find(|l| l.starts_with(&labelled)).unwrap();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert!(
        cells[2].ends_with("ms") || cells[2].ends_with('s'),
        "{table}"
    );
    assert_eq!(cells[5], "~/work", "{table}");
    assert!(cells[6].starts_with("sh -c "), "{table}");
    let bad = env.run(&[
        "run",
        "--cwd",
        &env.path("nowhere").display().to_string(),
        "true",
    ]);
    sandbox::assert_exit_says(&bad, 125, "--cwd: cannot run");
    let bad = env.run(&["run", "--env", "NOEQUALS", "true"]);
    sandbox::assert_exit_says(&bad, 125, "expected KEY=VALUE");
}

#[test]
fn a_record_without_a_command_says_what_it_is() {
    let env = with_a_run();
    // What a compaction's retry leaves: a record that keeps the retained tool output.
    let store = agentrun_fs::Store::open(&env.store).unwrap();
    let mut retention = store.begin_retention().unwrap();
    let text = "retained output\n".to_owned();
    retention
        .retain(&[agentrun_core::compaction::Retention {
            digest: agentrun_core::Digest::of(text.as_bytes()),
            text,
        }])
        .unwrap();
    let kept = retention.finish().unwrap().unwrap();

    let list = runs_json(&env, &[]);
    assert_eq!(list[0]["run_id"], kept.run_id.as_str());
    assert!(list[0]["command"].is_null(), "{}", list[0]);
    assert_eq!(list[0]["description"], agentrun_fs::RETAINED_DISPLAY);
    assert!(list[1]["description"].is_null(), "{}", list[1]);
    let o = env.run(&["runs"]);
    let table = sandbox::stdout(&o);
    let row = table.lines().find(|l| l.starts_with(&kept.run_id)).unwrap();
    assert!(
        row.ends_with(&format!("({})", agentrun_fs::RETAINED_DISPLAY)),
        "{table}"
    );
}

/// Where each of `keys` first appears in `text`, which must hold them all in this order.
#[track_caller]
fn assert_in_order(text: &str, keys: &[&str]) {
    let mut at = 0;
    for key in keys {
        let quoted = format!("\"{key}\":");
        let found = text[at..]
            .find(&quoted)
            .unwrap_or_else(|| panic!("{key} missing or out of order in {text}"));
        at += found + quoted.len();
    }
}

#[test]
fn every_command_prints_json_in_one_style_with_its_documented_key_order() {
    let env = with_a_run();
    // One pretty-printed document each, keys in the documented order.
    let documents: [(&[&str], &[&str]); 6] = [
        (
            &["runs", "--json"],
            &[
                "run_id",
                "status",
                "reason",
                "exit",
                "started_unix_ms",
                "finished_unix_ms",
                "duration_ms",
                "cwd",
                "label",
                "command",
                "description",
                "incomplete",
                "streams",
                "name",
                "lines",
                "bytes",
                "uri",
            ],
        ),
        (
            &["show", "--json", "last"],
            &[
                "run_id",
                "status",
                "reason",
                "command",
                "artifacts",
                "model_text",
                "record",
            ],
        ),
        (
            &["read", "--json", "last/stdout"],
            &[
                "uri",
                "offset",
                "lines",
                "total_lines",
                "next_offset",
                "next",
                "content",
                "content_is_utf8",
            ],
        ),
        (
            &["gc", "--json", "--dry-run"],
            &[
                "objects_kept",
                "records_expired",
                "dry_run",
                "retention",
                "grace",
            ],
        ),
        (
            &["verify", "--json"],
            &["objects_checked", "records_checked", "problems"],
        ),
        (
            &["config", "--json"],
            &[
                "config_file",
                "config_file_found",
                "settings",
                "store",
                "sink_var",
            ],
        ),
    ];
    for (args, keys) in documents {
        let o = env.run(args);
        assert!(o.status.success(), "{args:?}: {}", sandbox::stderr(&o));
        let text = sandbox::stdout(&o);
        assert!(
            text.starts_with("{\n  \"") || text.starts_with("[\n  {\n    \""),
            "{args:?}: {text}"
        );
        assert!(
            text.ends_with("}\n") || text.ends_with("]\n"),
            "{args:?}: {text}"
        );
        assert_in_order(&text, keys);
    }
    // `run --json`: the library's order.
    let o = env.run(&["run", "--json", "--", "true"]);
    let text = sandbox::stdout(&o);
    assert!(text.starts_with("{\n  \"run_id\""), "{text}");
    assert_in_order(
        &text,
        &[
            "run_id",
            "status",
            "reason",
            "artifacts",
            "model_text",
            "record",
        ],
    );

    // Errors in the command's style: a document, or one line for a JSON Lines command.
    let o = env.run(&["show", "--json", "zzzz"]);
    assert_eq!(o.status.code(), Some(125));
    let text = sandbox::stdout(&o);
    assert!(
        text.starts_with("{\n  \"error\": {\n    \"kind\""),
        "{text}"
    );
    assert_in_order(&text, &["error", "kind", "message", "exit_code"]);
    let o = env.run(&["runs", "--json", "--status", "done"]);
    assert_eq!(o.status.code(), Some(125));
    let text = sandbox::stdout(&o);
    assert!(text.starts_with("{\n  \"error\": {"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["kind"], "usage");
    let o = env.run(&["agent", "--json", "nosuchharness", "hi"]);
    assert_eq!(o.status.code(), Some(125));
    let text = sandbox::stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("{\"error\":{\"kind\":\"usage\",\"message\":"),
        "{text}"
    );
}
