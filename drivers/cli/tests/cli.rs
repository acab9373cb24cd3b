//! End-to-end scenarios of the `agentrun` binary: run, read, gc, verify, and their errors.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentrun_core::ResultRecord;

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, assert_exit_says, stderr, stdout};

/// How many files the store's `objects/` holds.
fn objects(env: &Sandbox) -> usize {
    count_files(&env.store.join("objects"))
}

fn count_files(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap().path())
        .map(|p| if p.is_dir() { count_files(&p) } else { 1 })
        .sum()
}

/// The `agentrun read …` suggestion printed on stderr by `run`.
fn suggested_read(o: &Output) -> Vec<String> {
    let err = stderr(o);
    let line = err
        .lines()
        .find_map(|l| l.split_once(": agentrun read "))
        .expect("a read suggestion");
    line.1.split_whitespace().map(str::to_owned).collect()
}

fn run_json(env: &Sandbox, args: &[&str]) -> (serde_json::Value, ResultRecord) {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    let o = env.run(&all);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let record: ResultRecord = serde_json::from_value(v["record"].clone()).unwrap();
    (v, record)
}

#[test]
fn run_previews_and_the_suggested_read_continues_exactly() {
    let env = Sandbox::new();
    let o = env.run(&["run", "--max-lines", "100", "--", "seq", "1", "5000"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let expected_head: String = (1..=100).map(|i| format!("{i}\n")).collect();
    assert!(out.starts_with(&format!(
        "[stdout]\n{expected_head}[Truncated. Read more: read(filePath=\"artifact://"
    )));
    assert!(
        out.contains("/stdout\", offset=100)]\n\n[stderr]\n"),
        "{out}"
    );
    let read = suggested_read(&o);
    assert_eq!(read[1..], ["--offset".to_owned(), "100".to_owned()]);
    let page = env.run(&["read", &read[0], "--offset", "100", "--limit", "3"]);
    assert_eq!(stdout(&page), "101\n102\n103\n");
    // The "next" hint keeps the caller's limit.
    assert!(
        stderr(&page).contains("--offset 103 --limit 3\n"),
        "{}",
        stderr(&page)
    );
    assert!(
        stderr(&page).contains("lines 101-103 of 5000 lines; next: agentrun read"),
        "{}",
        stderr(&page)
    );
    let all = env.run(&["read", &read[0], "--all"]);
    let expected: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    assert_eq!(stdout(&all), expected);
}

#[test]
fn exit_code_mirrors_the_child() {
    let env = Sandbox::new();
    for code in [0, 1, 3, 255] {
        let o = env.run(&["run", "--", "sh", "-c", &format!("exit {code}")]);
        assert_eq!(o.status.code(), Some(code));
    }
    let o = env.run(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15));
    let o = env.run(&["run", "--", "definitely-not-a-program-xyz"]);
    assert_exit_says(&o, 127, "definitely-not-a-program-xyz");
}

#[test]
fn replay_of_the_record_renders_the_live_text() {
    let env = Sandbox::new();
    let (v, record) = run_json(
        &env,
        &[
            "--max-bytes",
            "300",
            "--tail-lines",
            "3",
            "--",
            "sh",
            "-c",
            "seq 1 1000; echo oops >&2",
        ],
    );
    assert_eq!(record.render(), v["model_text"].as_str().unwrap());
    let stored: ResultRecord = serde_json::from_slice(
        &fs::read(
            env.store
                .join("records")
                .join(format!("{}.json", record.run_id)),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(stored, record);
    assert_eq!(stored.render(), v["model_text"].as_str().unwrap());
    assert_eq!(stored.display(), record.display());
    assert!(
        stored
            .render()
            .contains("the last 3 lines follow]\n998\n999\n1000\n"),
        "{}",
        stored.render()
    );
}

#[test]
fn read_serves_manifests_streams_and_reports_each_error_distinctly() {
    let env = Sandbox::new();
    let (_, record) = run_json(
        &env,
        &["--", "sh", "-c", "printf 'a\\nb\\n'; printf 'e\\n' >&2"],
    );
    let manifest = record.output_uri().to_string();
    let bare = env.run(&["read", &manifest]);
    assert!(stdout(&bare).starts_with("{\"format\":\"agentrun.manifest.v1\",\"streams\":["));
    assert_eq!(
        stdout(&env.run(&["read", &format!("{manifest}/stderr")])),
        "e\n"
    );

    let unknown = env.run(&["read", &format!("{manifest}/results")]);
    assert_eq!(unknown.status.code(), Some(125));
    assert!(
        stderr(&unknown).contains("stdout") && stderr(&unknown).contains("stderr"),
        "{}",
        stderr(&unknown)
    );

    let stdout_uri = format!("artifact://{}", record.stream("stdout").unwrap().sha256);
    let on_plain = env.run(&["read", &format!("{stdout_uri}/stdout")]);
    assert_exit_says(&on_plain, 125, "not a manifest");

    let missing = env.run(&["read", &format!("artifact://{}", "0".repeat(64))]);
    assert_exit_says(&missing, 125, "is not in this store");

    let before = objects(&env);
    let past = env.run(&["read", &stdout_uri, "--offset", "3"]);
    assert_exit_says(&past, 125, "past the end");
    let at_end = env.run(&["read", &stdout_uri, "--offset", "2"]);
    assert_eq!(
        (at_end.status.code(), stdout(&at_end).as_str()),
        (Some(0), "")
    );
    for bad in ["0", "2001"] {
        let o = env.run(&["read", &stdout_uri, "--limit", bad]);
        assert_eq!(o.status.code(), Some(125), "limit {bad}");
        assert!(stderr(&o).contains("between 1 and 2000"));
    }
    assert_eq!(
        objects(&env),
        before,
        "reads must never retain new artifacts"
    );
}

#[test]
fn malformed_uris_are_usage_errors_never_paths() {
    let env = Sandbox::new();
    let d = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let cases = [
        format!("artifact://{}", d.to_uppercase()),
        format!("artifact://{}", &d[..63]),
        format!("artifact://{d}0"),
        format!("artifact://{d}?q=1"),
        format!("artifact://{d}#f"),
        format!("artifact://{d}/%2e%2e"),
        format!("artifact://{d}/.."),
        format!("artifact://{d}/"),
        format!("artifact://{d}/stdout/extra"),
        "/etc/passwd".to_owned(),
    ];
    for uri in cases {
        let o = env.run(&["read", &uri]);
        assert_eq!(o.status.code(), Some(125), "{uri}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("agentrun: error: "), "{uri}");
        assert!(o.stdout.is_empty(), "{uri} produced output");
    }
}

#[test]
fn oversized_pages_fail_with_advice_and_byte_ranges_reach_every_byte() {
    let env = Sandbox::new();
    let (_, record) = run_json(
        &env,
        &[
            "--",
            "sh",
            "-c",
            "head -c 3000000 /dev/zero | tr '\\0' x; echo",
        ],
    );
    let uri = record
        .stream_uri(record.stream("stdout").unwrap())
        .to_string();
    let o = env.run(&["read", &uri]);
    assert_exit_says(&o, 125, "--byte-offset 0");
    let mut all = Vec::new();
    let mut offset = 0u64;
    loop {
        let o = env.run(&[
            "read",
            &uri,
            "--byte-offset",
            &offset.to_string(),
            "--byte-limit",
            "2097152",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        all.extend_from_slice(&o.stdout);
        match stderr(&o).split_once("--byte-offset ") {
            Some((_, next)) => {
                // The continuation keeps the caller's byte limit.
                assert!(next.trim_end().ends_with(" --byte-limit 2097152"), "{next}");
                offset = next.split_whitespace().next().unwrap().parse().unwrap();
            }
            None => break,
        }
    }
    assert_eq!(all.len(), 3_000_001);
    assert!(all[..3_000_000].iter().all(|&b| b == b'x'));
}

#[test]
fn a_corrupted_object_byte_is_an_error_never_data() {
    let env = Sandbox::new();
    let (_, record) = run_json(&env, &["--", "seq", "1", "20000"]);
    let digest = record.stream("stdout").unwrap().sha256.to_hex();
    let path = env
        .store
        .join("objects")
        .join(&digest[..2])
        .join(&digest[2..]);
    let mut bytes = fs::read(&path).unwrap();
    bytes[70_000] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let uri = format!("artifact://{digest}");
    let o = env.run(&["read", &uri, "--offset", "15000"]);
    assert_exit_says(&o, 125, "corrupt");
    assert!(o.stdout.is_empty());
    let o = env.run(&["read", &uri, "--offset", "0"]);
    assert_eq!(o.status.code(), Some(0), "an intact page still reads");
    let v = env.run(&["verify"]);
    assert_eq!(v.status.code(), Some(1));
    assert!(stdout(&v).contains(&digest), "{}", stdout(&v));
}

#[test]
fn store_with_loose_permissions_is_refused_with_the_fix() {
    let env = Sandbox::new();
    fs::create_dir_all(&env.store).unwrap();
    fs::set_permissions(&env.store, fs::Permissions::from_mode(0o755)).unwrap();
    let o = env.run(&["verify"]);
    assert_exit_says(&o, 125, "chmod 700");
}

#[test]
fn fresh_store_is_owner_only() {
    let env = Sandbox::new();
    env.run(&["run", "--", "echo", "hi"]);
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&env.store), 0o700);
    let mut stack = vec![env.store.clone()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                assert_eq!(mode(&p), 0o700, "{}", p.display());
                stack.push(p);
            } else {
                assert_eq!(mode(&p), 0o600, "{}", p.display());
            }
        }
    }
}

#[test]
fn a_full_disk_is_reported_and_loses_nothing_accepted() {
    let env = Sandbox::new();
    env.run(&["verify"]); // create the store
    // RLIMIT_FSIZE stands in for a full disk. agentrun catches SIGXFSZ itself, so the write
    // fails with EFBIG and is reported instead of the signal killing agentrun silently.
    let script = format!(
        "ulimit -f 2048; exec {} --store {} run -- seq 1 2000000",
        env!("CARGO_BIN_EXE_agentrun"),
        env.store.display()
    );
    let o = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(err.contains("agentrun: error:"), "{err}");
    assert!(
        err.contains("stdout is incomplete: ") && err.contains("File too large"),
        "{err}"
    );
    assert!(stdout(&o).starts_with("[Incomplete output: capture failed; capture fault on stdout"));
    assert!(!err.contains("panicked"));
    let v = env.run(&["verify"]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
}

/// A process that escaped the group (`setsid`) and writes after the run ended: the run is not
/// reported as a clean success, and stderr says what may be missing and why.
#[test]
fn output_an_escaped_process_writes_late_is_reported_missing() {
    let env = Sandbox::new();
    let pidfile = env.store.with_file_name("holder.pid");
    let script = format!(
        r#"setsid sh -c 'echo $$ > "$1"; sleep 30; echo late' holder '{}' & echo early"#,
        pidfile.display()
    );
    let o = env.run(&["run", "--", "sh", "-c", &script]);
    let err = String::from_utf8_lossy(&o.stderr);
    // The holder leads a group of its own (setsid): the group takes its `sleep` along.
    let holder = fs::read_to_string(&pidfile).unwrap_or_default();
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", holder.trim())])
        .status();
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains(
            "stdout is incomplete: output may be missing: a process outside the run's process group"
        ),
        "{err}"
    );
    assert!(
        err.contains("succeeded (exit 0), output incomplete;"),
        "{err}"
    );
    let out = stdout(&o);
    assert!(out.starts_with("[Incomplete output"), "{out}");
    assert!(out.contains("early") && !out.contains("late"), "{out}");
}

#[test]
fn sigkill_mid_capture_leaves_a_clean_store_after_gc() {
    let env = Sandbox::new();
    let pidfile = env.store.with_file_name("child.pid");
    let script = format!("echo $$ > '{}'; seq 1 100000; sleep 30", pidfile.display());
    let mut child = env
        .cmd(&["run", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let captures = env.store.join("captures");
    for _ in 0..200 {
        if count_files(&captures) > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    // SIGKILL leaves agentrun no chance to stop its child's group: do it for the test.
    let pgid = fs::read_to_string(&pidfile).unwrap();
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", pgid.trim())])
        .status()
        .unwrap();
    assert!(
        count_files(&captures) > 0,
        "the killed run left its capture"
    );
    let v = env.run(&["verify"]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
    let gc = env.run(&["gc", "--grace", "0s", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(report["captures_removed"], 1, "{report}");
    assert_eq!(fs::read_dir(&captures).unwrap().count(), 0);
}

#[test]
fn gc_keeps_what_records_reference() {
    let env = Sandbox::new();
    let (_, record) = run_json(&env, &["--", "sh", "-c", "echo out; echo err >&2"]);
    let gc = env.run(&["gc", "--grace", "0s", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(report["objects_removed"], 0, "{report}");
    for digest in record.artifacts() {
        let o = env.run(&["read", &format!("artifact://{digest}")]);
        assert_eq!(o.status.code(), Some(0));
    }
}

// ---- Process drivers and the clean result channel ----

/// `run --sink`: stdout is the clean answer alone, byte for byte; the preview (with the noisy
/// stdout) and the footer go to stderr.
#[test]
fn run_sink_prints_the_clean_answer_alone_on_stdout() {
    let env = Sandbox::new();
    let answer = "{ \"verdict\": \"MERGE\" }\n\x1b[31mstray\x1b[0m\r\n";
    let o = env
        .cmd(&[
            "run",
            "--sink",
            "--",
            "sh",
            "-c",
            r#"printf '\033[32mINFO\033[0m noisy {"verdict":"REJECT"}\n'; printf '%s' "$ANSWER" > "$AGENTRUN_RESULT_SINK"; exit 3"#,
        ])
        .env("ANSWER", answer)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(o.stdout, answer.as_bytes());
    assert!(stderr(&o).contains("noisy"), "{}", stderr(&o));
    assert!(stderr(&o).contains("exit 3"), "{}", stderr(&o));

    let (v, _) = run_json(
        &env,
        &[
            "--sink",
            "--",
            "sh",
            "-c",
            r#"printf 'A' > "$AGENTRUN_RESULT_SINK""#,
        ],
    );
    assert_eq!(v["result"], "A");
    assert_eq!(v["sink"]["outcome"], "read");
}

#[test]
fn run_sink_without_an_answer_leaves_stdout_empty_and_says_why() {
    let env = Sandbox::new();
    let o = env.run(&["run", "--sink", "--", "sh", "-c", "echo only-stdout"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("only-stdout"), "{}", stderr(&o));
    assert!(stderr(&o).contains("no clean result"), "{}", stderr(&o));
    assert!(stderr(&o).contains("unwritten"), "{}", stderr(&o));
}

/// A run is named by its id, a unique prefix of it, or `last`: `read RUN/STREAM` pages that
/// run's stream (raw bytes on stdout, the artifact URI in the continuation on stderr) and
/// `show` shows it; a prefix of several runs is an error listing them.
#[test]
fn runs_are_named_by_id_prefix_or_last() {
    let env = Sandbox::new();
    let o = env.run(&["read", "last/stdout"]);
    assert_exit_says(&o, 125, "no store");
    let first = env.run(&["run", "--json", "--", "seq", "1", "10"]);
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let second = env.run(&["run", "--json", "--", "seq", "1", "30"]);
    let second: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let (a, b) = (
        first["record"]["run_id"].as_str().unwrap(),
        second["record"]["run_id"].as_str().unwrap(),
    );
    let want: String = (1..=30).map(|i| format!("{i}\n")).collect();
    let o = env.run(&["read", "last/stdout"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), want);
    let o = env.run(&["read", "last/stdout", "--offset", "20", "--limit", "5"]);
    assert_eq!(
        stdout(&o),
        want.lines()
            .skip(20)
            .take(5)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    let uri = second["artifacts"]["stdout"].as_str().unwrap();
    assert!(
        stderr(&o).contains(&format!("agentrun read {uri} --offset 25 --limit 5")),
        "{}",
        stderr(&o)
    );
    let o = env.run(&["read", &format!("{a}/stdout")]);
    assert_eq!(
        stdout(&o),
        (1..=10).map(|i| format!("{i}\n")).collect::<String>()
    );
    // The shortest prefix that tells the two apart, and one that does not.
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let o = env.run(&["read", &format!("{}/stdout", &b[..=common])]);
    assert_eq!(stdout(&o), want);
    let o = env.run(&["read", &format!("{}/stdout", &a[..common])]);
    let err = assert_exit_says(&o, 125, "ambiguous");
    assert!(err.contains(a) && err.contains(b), "{err}");
    let o = env.run(&["show", &a[..common]]);
    assert_exit_says(&o, 125, "ambiguous");
    let o = env.run(&["show", "last"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("agentrun: run {b} ")),
        "{}",
        stderr(&o)
    );
    // A stream the run does not have, a name that is no id, a URI that is not well formed.
    assert_exit_says(
        &env.run(&["read", "last/nosuch"]),
        125,
        "its streams: stdout, stderr",
    );
    assert_exit_says(&env.run(&["read", "9/stdout"]), 125, "no run has the id");
    assert_exit_says(&env.run(&["read", "last"]), 125, "RUN/STREAM");
    assert_exit_says(
        &env.run(&["read", "artifact://last/stdout"]),
        125,
        "artifact://last",
    );
}

/// `--require-result`: a program that exited 0 without writing its answer fails (exit 1); one
/// that wrote it succeeds; a program's own failure keeps its code.
#[test]
fn require_result_fails_a_run_whose_sink_was_not_written() {
    let env = Sandbox::new();
    let o = env.run(&[
        "run",
        "--sink",
        "--require-result",
        "--",
        "sh",
        "-c",
        "echo hi",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("no clean result"), "{}", stderr(&o));
    let o = env.run(&["run", "--sink", "--require-result", "--json", "--", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = env.run(&[
        "run",
        "--sink",
        "--require-result",
        "--",
        "sh",
        "-c",
        r#"printf 'A' > "$AGENTRUN_RESULT_SINK""#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "A");
    let o = env.run(&[
        "run",
        "--sink",
        "--require-result",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // Only with --sink: without it there is no result to require.
    let o = env.run(&["run", "--require-result", "--", "true"]);
    assert_exit_says(&o, 125, "--sink");
}

/// A value of the sink variable inherited from agentrun's own environment never reaches the
/// child without --sink; --sink-var renames the variable.
#[test]
fn run_removes_an_inherited_sink_variable_and_honours_sink_var() {
    let env = Sandbox::new();
    let probe =
        r#"printf '%s|%s' "${AGENTRUN_RESULT_SINK-unset}" "${AMPLIHACK_RESULT_SINK-unset}""#;
    let o = env
        .cmd(&["run", "--", "sh", "-c", probe])
        .env("AGENTRUN_RESULT_SINK", "/tmp/stale")
        .env("AMPLIHACK_RESULT_SINK", "/tmp/stale-amplihack")
        .output()
        .unwrap();
    assert!(stdout(&o).contains("\nunset|unset"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("/tmp/stale"), "{}", stdout(&o));
    let o = env
        .cmd(&[
            "run",
            "--sink",
            "--sink-var",
            "AMPLIHACK_RESULT_SINK",
            "--",
            "sh",
            "-c",
            r#"printf 'amp' > "$AMPLIHACK_RESULT_SINK""#,
        ])
        .env("AMPLIHACK_RESULT_SINK", "/tmp/stale")
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "amp", "{}", stderr(&o));
    let o = env.run(&["run", "--sink-var", "A=B", "--", "true"]);
    assert_exit_says(&o, 125, "invalid result-sink variable");
}

#[test]
fn run_timeouts_exit_124() {
    let env = Sandbox::new();
    let started = std::time::Instant::now();
    let o = env.run(&[
        "run",
        "--timeout",
        "300ms",
        "--kill-grace",
        "200ms",
        "--",
        "sh",
        "-c",
        "echo started; sleep 30",
    ]);
    assert_eq!(o.status.code(), Some(124), "{}", stderr(&o));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(stdout(&o).contains("started"), "{}", stdout(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
    let o = env.run(&[
        "run",
        "--idle-timeout",
        "300ms",
        "--",
        "sh",
        "-c",
        "echo once; sleep 30",
    ]);
    assert_exit_says(&o, 124, "idle timeout");
}

#[test]
fn sigterm_stops_the_child_and_keeps_the_output_as_a_cancelled_run() {
    let env = Sandbox::new();
    let pidfile = env.store.with_file_name("child.pid");
    let script = format!("echo $$ > '{}'; echo started; sleep 60", pidfile.display());
    let child = env
        .cmd(&["run", "--kill-grace", "1s", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agentrun = child.id();
    for _ in 0..200 {
        if fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n')) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    Command::new("kill")
        .args(["-TERM", &agentrun.to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("[Incomplete output: the run cancelled]\n[stdout]\nstarted\n"));
    assert!(stderr(&o).contains("stopped by a signal"), "{}", stderr(&o));
    // The child's group is gone (zombies awaiting a reaper do not count), and the run is
    // recorded.
    let pgid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        live_group_members(pgid).is_empty(),
        "the child's group was stopped"
    );
    let records: Vec<_> = fs::read_dir(env.store.join("records")).unwrap().collect();
    assert_eq!(records.len(), 1);
}

/// What a program leaves running in the background is stopped when it exits, and `agentrun
/// run` exits with the program's own status; `--keep-background` leaves it running.
#[test]
fn background_processes_are_stopped_unless_kept() {
    let env = Sandbox::new();
    let pidfile = env.store.with_file_name("bg.pid");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 </dev/null & echo $! > '{}'; exit 3",
        pidfile.display()
    );
    let background = || -> i32 {
        fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let o = env.run(&["run", "--", "sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let bg = background();
    // Generous: the process gets SIGTERM before `run` returns, and dies of it when scheduled.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !agentrun_tests::processes::ended(bg) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        agentrun_tests::processes::ended(bg),
        "the background process {bg} was stopped"
    );
    let o = env.run(&["run", "--keep-background", "--", "sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let bg = background();
    let kept = !agentrun_tests::processes::ended(bg);
    let _ = Command::new("kill")
        .args(["-KILL", &bg.to_string()])
        .status();
    assert!(kept, "--keep-background kept {bg}");
}

/// agentrun in a PID namespace of its own that still sees the `/proc` of the outer one
/// (`unshare --pid` without `--mount-proc`): the ids in `/proc` are not the ones its signals
/// use, so it cannot look past zombies there; a background process that ignores SIGTERM is
/// still killed when the grace ends. Skipped where `unshare` cannot make a PID namespace.
#[test]
fn a_foreign_proc_does_not_spare_the_group_its_sigkill() {
    let env = Sandbox::new();
    // Namespaces as root, or as an ordinary user with a user namespace of their own.
    let unshare = [
        &["--pid", "--fork", "--kill-child"][..],
        &[
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--kill-child",
        ][..],
    ]
    .into_iter()
    .find(|flags| {
        Command::new("unshare")
            .args(*flags)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let Some(unshare) = unshare else {
        eprintln!("skipped: `unshare` cannot make a PID namespace here");
        return;
    };
    // A duration no other test uses, to find the process from outside the namespace.
    let marker = "301.4137";
    let started = env.path("started");
    let inner = format!(
        "trap '' TERM; sleep {marker} >/dev/null 2>&1 </dev/null & : > '{}'; exit 0",
        started.display()
    );
    let rc = env.path("rc");
    // The namespace's first process stays (so the namespace does) after the run returned.
    let outer =
        r#""$0" --store "$1" run --kill-grace 2s -- sh -c "$2"; echo $? > "$3"; exec sleep 120"#;
    let mut namespace = sandbox::command("unshare")
        .args(unshare)
        .args(["sh", "-c", outer])
        .arg(env!("CARGO_BIN_EXE_agentrun"))
        .arg(&env.store)
        .arg(&inner)
        .arg(&rc)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let patience = std::time::Duration::from_secs(60);
    let eventually = |mut f: Box<dyn FnMut() -> bool + '_>| {
        let until = std::time::Instant::now() + patience;
        while !f() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        f()
    };
    // No window to catch: the started file says the sleeper was forked; once the run has
    // returned, no live process may have its arguments (a killed one is a zombie of the
    // namespace's first process, which never reaps it, and a zombie has no command line).
    let returned = eventually(Box::new(|| {
        fs::read_to_string(&rc).is_ok_and(|c| c.ends_with('\n'))
    }));
    let found = started.exists();
    let killed = eventually(Box::new(|| process_with_args(&["sleep", marker]).is_none()));
    // Ending the namespace's first process ends every process in it.
    let _ = namespace.kill();
    let _ = namespace.wait();
    assert!(found, "the background process started");
    assert!(returned, "the run returned");
    assert_eq!(fs::read_to_string(&rc).unwrap(), "0\n");
    assert!(killed, "the background process ignoring SIGTERM was killed");
}

/// The first process whose argv is `args`, from /proc.
fn process_with_args(args: &[&str]) -> Option<i32> {
    let wanted: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
        (fs::read(entry.path().join("cmdline")).ok()? == wanted).then_some(pid)
    })
}

/// Processes of group `pgid` that are not zombies, from /proc.
fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesized command: state, ppid, pgrp, …
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && fields[0] != "Z" {
            live.push(pid);
        }
    }
    live
}

#[test]
fn the_package_installs_only_the_agentrun_binary() {
    // `cargo install --path drivers/cli` installs every binary of the package: test-only
    // programs must not be among them.
    let manifest = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    assert_eq!(manifest.matches("[[bin]]").count(), 1, "{manifest}");
    assert!(manifest.contains("name = \"agentrun\"\npath = \"src/main.rs\""));
    let src_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin");
    assert!(!src_bin.exists(), "no auto-discovered binaries in src/bin");
}

#[test]
fn a_program_whose_interpreter_is_missing_is_named_as_such() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Sandbox::new();
    let script = env.store.with_file_name("needs-interp");
    fs::write(&script, "#!/nonexistent/interpreter\necho hi\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let o = env.run(&["run", "--", script.to_str().unwrap()]);
    assert_exit_says(&o, 127, "its interpreter");
    let o = env.run(&["run", "--", "no-such-program-xyz"]);
    assert_exit_says(&o, 127, "no such program");
    // A directory is not a program; chmod would not help.
    let dir = env.store.with_file_name("a-directory");
    fs::create_dir(&dir).unwrap();
    let o = env.run(&["run", "--", dir.to_str().unwrap()]);
    assert_exit_says(&o, 126, "it is a directory, not a program");
}

/// Line and byte numbers on stderr are 1-based and inclusive; --offset and --byte-offset stay
/// the zero-based number of lines or bytes skipped, so the next offset is the last number.
#[test]
fn read_labels_are_one_based_and_offsets_zero_based() {
    let env = Sandbox::new();
    env.run(&["run", "seq", "1", "30"]);
    let o = env.run(&["read", "last/stdout", "--offset", "5", "--limit", "10"]);
    assert_eq!(
        stdout(&o),
        (6..=15).map(|i| format!("{i}\n")).collect::<String>()
    );
    assert!(
        stderr(&o).contains("agentrun: lines 6-15 of 30 lines; next: agentrun read ")
            && stderr(&o).contains("/stdout --offset 15 --limit 10"),
        "{}",
        stderr(&o)
    );
    let o = env.run(&["read", "last/stdout", "--offset", "25"]);
    assert!(
        stderr(&o).contains("lines 26-30 of 30 lines (end)"),
        "{}",
        stderr(&o)
    );
    // "1\n2\n" is bytes 1-4.
    let o = env.run(&[
        "read",
        "last/stdout",
        "--byte-offset",
        "0",
        "--byte-limit",
        "4",
    ]);
    assert_eq!(stdout(&o), "1\n2\n");
    assert!(
        stderr(&o).contains("agentrun: bytes 1-4 of 81 bytes; next: ")
            && stderr(&o).contains("--byte-offset 4 --byte-limit 4"),
        "{}",
        stderr(&o)
    );
    // The tail view after lines 1-2 leaves out lines 3-28 (the last two follow).
    let o = env.run(&[
        "run",
        "--max-lines",
        "2",
        "--tail-lines",
        "2",
        "seq",
        "1",
        "30",
    ]);
    assert!(
        stdout(&o).contains("[Lines 3-28 not shown in full; the last 2 lines follow]\n29\n30\n"),
        "{}",
        stdout(&o)
    );
}

/// `config --init` writes the commented sample where the config file is looked for, never
/// over an existing file unless --force; the sample changes no setting.
#[test]
fn config_init_writes_a_commented_sample_once() {
    let env = Sandbox::new();
    let path = env.path("agentrun.toml");
    let p = path.to_str().unwrap();
    let o = env.run(&["--config", p, "config", "--init"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sample = fs::read_to_string(&path).unwrap();
    assert!(sample.contains("# max_lines = 2000"), "{sample}");
    let o = env.run(&["--config", p, "config", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["settings"]["tool_output.max_lines"]["source"], "default",
        "{v}"
    );
    fs::write(&path, "# mine\n").unwrap();
    let o = env.run(&["--config", p, "config", "--init"]);
    assert_exit_says(&o, 125, "already exists");
    assert_eq!(fs::read_to_string(&path).unwrap(), "# mine\n");
    let o = env.run(&["--config", p, "config", "--init", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&path).unwrap(), sample);
}
