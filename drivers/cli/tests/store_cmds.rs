//! The store commands. On a closed or failing stdout: a closed pipe ends the output quietly
//! with the command's own exit code, a write error is a message on stderr (also under
//! `--json`) and a non-zero exit, never a panic (exit 101). On a damaged record: `runs` lists
//! the others and names the damaged one.

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
