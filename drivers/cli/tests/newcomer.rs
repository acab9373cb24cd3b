//! The command line as a newcomer meets it: each test runs the built `agentrun` the way a user
//! types it and asserts stdout, stderr and the exit code.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, assert_exit_says, stderr as err, stdout as out};

/// A temporary home: its own store, config directory and `HOME`, so nothing outside is read.
struct Home {
    sandbox: Sandbox,
}

impl Home {
    fn new() -> Self {
        Self {
            sandbox: Sandbox::new(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.sandbox.path(rel)
    }

    /// The store the default settings resolve to in this home.
    fn default_store(&self) -> PathBuf {
        self.path("home/.local/share/agentrun")
    }

    /// `agentrun ARGS` with this home's `HOME`, no XDG variables, no `AGENTRUN_HOME` (and no
    /// `--store`: the settings find the store).
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.program(env!("CARGO_BIN_EXE_agentrun"));
        c.args(args);
        c
    }

    /// `program` in this home's environment (see [`Home::cmd`], [`sandbox::command`]).
    fn program(&self, program: &str) -> Command {
        fs::create_dir_all(self.path("home")).unwrap();
        let mut c = sandbox::command(program);
        c.env("HOME", self.path("home"))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Writes the default config file.
    fn config(&self, text: &str) {
        let dir = self.path("home/.config/agentrun");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("config.toml"), text).unwrap();
    }
}

/// The `agentrun read …` commands printed on stderr, as argument vectors (without `agentrun`).
fn read_commands(o: &Output) -> Vec<Vec<String>> {
    err(o)
        .lines()
        .filter_map(|l| l.split_once(": agentrun read "))
        .map(|(_, rest)| {
            let mut v = vec!["read".to_owned()];
            v.extend(rest.split_whitespace().map(str::to_owned));
            v
        })
        .collect()
}

fn run_id(o: &Output) -> String {
    let e = err(o);
    let rest = e.split_once("agentrun: run ").expect("a run summary").1;
    rest.split_whitespace().next().unwrap().to_owned()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn run_takes_the_program_without_a_double_dash() {
    let h = Home::new();
    let o = h.run(&["run", "ls", "/"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("[stdout]\n"), "{}", out(&o));
    // Options after the program are the program's.
    let o = h.run(&["run", "sh", "-c", "echo \"$@\"", "sh", "--json", "-x"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).starts_with("[stdout]\n--json -x\n"), "{}", out(&o));
    // `--` still works.
    let o = h.run(&["run", "--max-lines", "1", "--", "seq", "3"]);
    assert!(
        out(&o).starts_with("[stdout]\n1\n[Truncated."),
        "{}",
        out(&o)
    );
    // The usage line says what goes where.
    let help = h.run(&["run", "--help"]);
    assert!(
        out(&help).contains("Usage: agentrun run [OPTIONS] <PROGRAM> [ARGS]..."),
        "{}",
        out(&help)
    );
}

#[test]
fn every_non_empty_stream_gets_a_read_command_that_works() {
    let h = Home::new();
    let o = h.run(&["run", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let reads = read_commands(&o);
    assert_eq!(reads.len(), 2, "{}", err(&o));
    assert!(reads[0][1].ends_with("/stdout") && reads[1][1].ends_with("/stderr"));
    let page = h.run(&args(&reads[0]));
    assert_eq!(
        (page.status.code(), out(&page)),
        (Some(0), "out\n".to_owned())
    );
    assert!(
        err(&page).contains("lines 1-1 of 1 line (end)"),
        "{}",
        err(&page)
    );
    let page = h.run(&args(&reads[1]));
    assert_eq!(out(&page), "err\n");
    // An empty stream has nothing to read, and gets no command.
    let o = h.run(&["run", "echo", "only stdout"]);
    assert_eq!(read_commands(&o).len(), 1, "{}", err(&o));
}

#[test]
fn run_json_carries_status_and_artifact_uris() {
    let h = Home::new();
    let o = h.run(&["run", "--json", "false"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["reason"], "exit 1");
    assert_eq!(v["exit"]["code"], 1);
    let manifest = v["artifacts"]["manifest"].as_str().unwrap();
    assert_eq!(
        v["artifacts"]["stdout"].as_str().unwrap(),
        format!("{manifest}/stdout")
    );
    assert_eq!(
        v["artifacts"]["stderr"].as_str().unwrap(),
        format!("{manifest}/stderr")
    );
    let o = h.run(&["run", "--json", "true"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "succeeded");
}

#[test]
fn show_replays_a_run_and_runs_lists_it() {
    let h = Home::new();
    let o = h.run(&["run", "--max-lines", "2", "seq", "5"]);
    let id = run_id(&o);
    let shown = h.run(&["show", &id]);
    assert_eq!(shown.status.code(), Some(0), "{}", err(&shown));
    assert_eq!(out(&shown), out(&o), "the same preview, without rerunning");
    // The footer as the run printed it: the record keeps how the run ended.
    assert_eq!(
        err(&shown).lines().next(),
        err(&o).lines().next(),
        "{}",
        err(&shown)
    );
    assert!(
        err(&shown).contains("agentrun read artifact://"),
        "{}",
        err(&shown)
    );
    let listed = h.run(&["runs"]);
    assert_eq!(listed.status.code(), Some(0));
    assert!(out(&listed).starts_with("RUN ID"), "{}", out(&listed));
    assert!(out(&listed).contains(&id), "{}", out(&listed));
    assert!(out(&listed).contains("stdout 10 B"), "{}", out(&listed));
    assert!(
        out(&listed).trim_end().ends_with(" seq 5"),
        "{}",
        out(&listed)
    );
    let failed = h.run(&["run", "sh", "-c", "exit 4"]);
    assert_eq!(failed.status.code(), Some(4));
    let listed = out(&h.run(&["runs", "-n", "1"]));
    assert!(listed.contains(" failed (exit 4) "), "{listed}");
    // Listing none is a mistake, not "no runs recorded".
    let none = h.run(&["runs", "-n", "0"]);
    assert_eq!(none.status.code(), Some(125), "{}", err(&none));
    assert!(err(&none).contains("'0'"), "{}", err(&none));
    let json = h.run(&["runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[1]["run_id"], id.as_str());
    assert_eq!(v[1]["streams"][0]["lines"], 5);
    assert_eq!(v[1]["command"], serde_json::json!(["seq", "5"]));
    assert_eq!(
        (v[0]["status"].as_str(), v[0]["exit"]["code"].as_i64()),
        (Some("failed"), Some(4))
    );
    let unknown = h.run(&["show", "no-such-run"]);
    assert_exit_says(
        &unknown,
        125,
        "no run or session has the id or id prefix \"no-such-run\"",
    );
}

#[test]
fn an_over_long_line_is_continued_by_byte_offset() {
    let h = Home::new();
    let o = h.run(&[
        "run",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo after",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let reads = read_commands(&o);
    assert_eq!(
        reads[0][2..],
        ["--byte-offset".to_owned(), "51200".to_owned()]
    );
    let page = h.run(&args(&reads[0]));
    assert_eq!(page.status.code(), Some(0), "{}", err(&page));
    assert_eq!(page.stdout.len(), 1 << 20);
    assert!(page.stdout.iter().all(|&b| b == b'x'));
    assert!(
        err(&page).contains("next: agentrun read ") && err(&page).contains("--byte-offset 1099776"),
        "{}",
        err(&page)
    );
    // Reading lines from the long line says how to read it instead.
    let by_line = h.run(&["read", &reads[0][1]]);
    assert_exit_says(&by_line, 125, "--byte-offset 0");
    // Past it, line pages work again.
    let rest = h.run(&["read", &reads[0][1], "--offset", "1"]);
    assert_eq!(out(&rest), "after\n");
}

#[test]
fn reading_a_manifest_names_its_streams() {
    let h = Home::new();
    let o = h.run(&["run", "--json", "echo", "hi"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let manifest = v["artifacts"]["manifest"].as_str().unwrap();
    let past = h.run(&["read", manifest, "--offset", "5"]);
    assert_eq!(past.status.code(), Some(125));
    let e = err(&past);
    assert!(e.contains("it has 1 line;"), "{e}");
    assert!(
        e.contains("manifest") && e.contains("(stdout, stderr)"),
        "{e}"
    );
    assert!(
        e.contains(&format!("agentrun read {manifest}/stdout")),
        "{e}"
    );
    let bare = h.run(&["read", manifest]);
    assert_exit_says(&bare, 0, "is the manifest of a run's streams");
}

#[test]
fn stdin_is_null_unless_asked() {
    let h = Home::new();
    let piped = |args: &[&str]| {
        let mut c = h.cmd(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"x\n").unwrap();
        child.wait_with_output().unwrap()
    };
    assert_eq!(out(&piped(&["run", "cat"])), "[stdout]\n\n[stderr]\n");
    assert_eq!(
        out(&piped(&["run", "--stdin", "inherit", "cat"])),
        "[stdout]\nx\n\n[stderr]\n"
    );
    let file = h.path("input.txt");
    fs::write(&file, "from a file\n").unwrap();
    let o = h.run(&["run", "--stdin", file.to_str().unwrap(), "cat"]);
    assert_eq!(out(&o), "[stdout]\nfrom a file\n\n[stderr]\n");
    let missing = h.run(&["run", "--stdin", "/nonexistent/input", "cat"]);
    assert_exit_says(&missing, 125, "--stdin /nonexistent/input");
}

/// Runs `agentrun ARGS` on a new pseudo-terminal (python3's `pty.fork`: a session of its own
/// with the terminal as its controlling terminal and agentrun in its foreground group, as in
/// an interactive shell) and returns its exit code and everything it wrote to the terminal.
fn on_a_terminal(h: &Home, args: &[&str]) -> (i32, String) {
    const DRIVER: &str = r#"
import json, os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out, deadline = b"", time.monotonic() + 60
while time.monotonic() < deadline:
    if not select.select([fd], [], [], 1)[0]:
        continue
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other side was closed
        break
    if not chunk:
        break
    out += chunk
else:
    os.kill(pid, 9)
status = os.waitpid(pid, 0)[1]
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "out": out.decode("utf-8", "replace")}))
"#;
    let o = h
        .program("python3")
        .args(["-c", DRIVER, env!("CARGO_BIN_EXE_agentrun")])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (
        v["code"].as_i64().unwrap() as i32,
        v["out"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn stdin_inherit_refuses_a_terminal_instead_of_hanging() {
    let h = Home::new();
    // On a terminal the child, in a group of its own, would be stopped by its first read
    // (SIGTTIN) until the timeout: it must be refused up front, with what to do instead.
    let args = [
        "run",
        "--stdin",
        "inherit",
        "--timeout",
        "3s",
        "--kill-grace",
        "1s",
        "cat",
    ];
    let (code, text) = on_a_terminal(&h, &args);
    assert_eq!(code, 125, "{text}");
    assert!(
        text.contains("agentrun: error: --stdin inherit: "),
        "{text}"
    );
    assert!(
        text.contains("SIGTTIN") && text.contains("--stdin FILE"),
        "{text}"
    );
    assert!(!text.contains("timed out"), "{text}");
    // The other stdin modes run normally on a terminal.
    let (code, text) = on_a_terminal(&h, &["run", "echo", "fine"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("[stdout]\r\nfine\r\n"), "{text}");
}

#[test]
fn gc_expires_old_records_by_default_and_says_what_it_kept() {
    let h = Home::new();
    let old = h.run(&["run", "echo", "old"]);
    let young = h.run(&["run", "echo", "young"]);
    let old_record = h
        .default_store()
        .join(format!("records/{}.json", run_id(&old)));
    let month_ago = SystemTime::now() - Duration::from_secs(31 * 86_400);
    fs::File::options()
        .write(true)
        .open(&old_record)
        .unwrap()
        .set_modified(month_ago)
        .unwrap();
    let o = h.run(&["gc", "--grace", "0s"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("1 expired record"), "{text}");
    assert!(
        text.contains("kept 1 record (younger than the 30d retention period (default))"),
        "{text}"
    );
    assert!(!old_record.exists());
    assert_eq!(h.run(&["show", &run_id(&young)]).status.code(), Some(0));
    // Configured retention, and `never`.
    h.config("[retention]\nrecords = \"never\"\n");
    let o = h.run(&["gc", "--dry-run"]);
    assert!(out(&o).contains("records are kept forever"), "{}", out(&o));
    // The flag overrides the file, in both spellings and both forms.
    for args in [
        &["gc", "--dry-run", "--retention", "12h"][..],
        &["gc", "--dry-run", "--expire-records=12h"],
    ] {
        let o = h.run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
        assert!(
            out(&o).contains("younger than the 12h retention period (flag --retention)"),
            "{args:?}: {}",
            out(&o)
        );
    }
    let o = h.run(&["gc", "--json", "--dry-run", "--retention", "never"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let report: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(
        report.get("retention"),
        Some(&serde_json::Value::Null),
        "{report}"
    );
    let o = h.run(&["gc", "--retention", "soon"]);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("\"never\""), "{}", err(&o));
}

#[test]
fn the_config_file_sets_limits_and_flags_override_it() {
    let h = Home::new();
    h.config("[tool_output]\nmax_lines = 3\n");
    let o = h.run(&["run", "seq", "10"]);
    assert!(
        out(&o).starts_with("[stdout]\n1\n2\n3\n[Truncated."),
        "{}",
        out(&o)
    );
    let o = h.run(&["run", "--max-lines", "5", "seq", "10"]);
    assert!(
        out(&o).starts_with("[stdout]\n1\n2\n3\n4\n5\n[Truncated."),
        "{}",
        out(&o)
    );
    let c = h.run(&["config"]);
    assert_eq!(c.status.code(), Some(0), "{}", err(&c));
    let text = out(&c);
    assert!(!text.contains("(not found)"), "{text}");
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .to_owned()
    };
    assert!(line("max_lines").ends_with("# config file"), "{text}");
    assert!(line("max_bytes").contains("51200") && line("max_bytes").ends_with("# default"));
    assert!(line("records").contains("\"30d\""), "{text}");
    let json = h.run(&["config", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["settings"]["tool_output.max_lines"]["value"], 3);
    assert_eq!(
        v["settings"]["tool_output.max_lines"]["source"],
        "config file"
    );
    // --config names another file; the store from it is used.
    let other = h.path("other.toml");
    let store = h.path("configured-store");
    fs::write(
        &other,
        format!(
            "store = {:?}\nsink_var = \"MY_SINK\"\n",
            store.display().to_string()
        ),
    )
    .unwrap();
    let o = h.run(&["--config", other.to_str().unwrap(), "run", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(store.join("records").is_dir());
    let c = h.run(&[
        "--config",
        other.to_str().unwrap(),
        "--store",
        "/tmp/flag-store",
        "config",
    ]);
    assert!(
        out(&c).contains("store = \"/tmp/flag-store\""),
        "{}",
        out(&c)
    );
    assert!(out(&c).contains("# flag --store"), "{}", out(&c));
    assert!(out(&c).contains("MY_SINK"), "{}", out(&c));
    // Mistakes are named.
    h.config("[tool_output]\nmax_line = 3\n");
    let o = h.run(&["run", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(
        err(&o).contains("max_line") && err(&o).contains("config.toml"),
        "{}",
        err(&o)
    );
    let o = h.run(&["--config", "/nonexistent/config.toml", "runs"]);
    assert_exit_says(&o, 125, "/nonexistent/config.toml");
}

#[test]
fn agentrun_failures_exit_125_and_never_collide_with_the_program() {
    let h = Home::new();
    // The program's own code passes through.
    let o = h.run(&["run", "ls", "/nonexistent"]);
    assert_eq!(o.status.code(), Some(2));
    // agentrun's own usage errors are 125, and name the flag.
    let o = h.run(&["run", "--max-lines", "0", "seq", "3"]);
    assert_exit_says(&o, 125, "--max-lines");
    let o = h.run(&["run", "--max-payload-bytes", "10", "seq", "3"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(err(&o).contains("--max-payload-bytes") && !err(&o).contains("max_payload_bytes"));
    let o = h.run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(125));
    let o = h.run(&["read", "artifact://nope"]);
    assert_eq!(o.status.code(), Some(125));
    let o = h.run(&["run", "no-such-program-xyz"]);
    assert_eq!(o.status.code(), Some(127));
    let o = h.run(&["run", "--timeout", "1s", "sleep", "30"]);
    assert_eq!(o.status.code(), Some(124));
    // One table, in --help.
    let help = out(&h.run(&["--help"]));
    for row in ["124 ", "125 ", "126 ", "127 ", "128+N"] {
        assert!(help.contains(row), "{help}");
    }
}

#[test]
fn status_words_agree_across_preview_footer_and_json() {
    let h = Home::new();
    let o = h.run(&[
        "run",
        "--timeout",
        "1s",
        "sh",
        "-c",
        "echo started; sleep 30",
    ]);
    assert_eq!(o.status.code(), Some(124));
    assert!(
        out(&o).starts_with("[Incomplete output: the run cancelled]\n"),
        "{}",
        out(&o)
    );
    assert!(
        err(&o).contains(" cancelled (timed out after 1s);"),
        "{}",
        err(&o)
    );
    let o = h.run(&["run", "--json", "--timeout", "1s", "sleep", "30"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["record"]["capture_status"].as_str()),
        (Some("cancelled"), Some("cancelled"))
    );
    let o = h.run(&["run", "sh", "-c", "exit 3"]);
    assert!(err(&o).contains(" failed (exit 3);"), "{}", err(&o));
    // A stream that never finished does not claim success.
    let mut c = h.cmd(&["interpret", "--harness", "claude"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m\"}\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        out(&o).contains("status: turn failed (cut_off): the stream ended without a final result"),
        "{}",
        out(&o)
    );
}

#[test]
fn help_is_wrapped_grouped_and_has_examples() {
    let h = Home::new();
    for sub in [
        "run",
        "read",
        "show",
        "runs",
        "gc",
        "verify",
        "config",
        "agent",
        "interpret",
        "mcp",
    ] {
        let o = h.run(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub}");
        let text = out(&o);
        assert!(text.contains("Examples:\n"), "{sub}: {text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{sub}: {line:?} is too long");
        }
    }
    let run = out(&h.run(&["run", "--help"]));
    let preview = run.find("Preview options:").unwrap();
    let global = run.find("Global options:").unwrap();
    assert!(preview < global && run[global..].contains("--store"));
    // interpret uses no store: it does not advertise one.
    assert!(!out(&h.run(&["interpret", "--help"])).contains("--store"));
}

#[test]
fn plurals_are_right() {
    let h = Home::new();
    let o = h.run(&["run", "echo", "one"]);
    assert!(
        err(&o).contains("stdout 1 line, 4 bytes; stderr 0 lines, 0 bytes"),
        "{}",
        err(&o)
    );
}

#[test]
fn json_commands_report_errors_as_json() {
    let h = Home::new();
    for argv in [
        &["agent", "--json", "nosuch-harness", "hi"][..],
        &["read", "--json", "artifact://bad"][..],
        &["run", "--json", "--max-lines", "0", "true"][..],
        &["show", "--json", "no-such-run"][..],
    ] {
        let o = h.run(argv);
        assert_eq!(o.status.code(), Some(125), "{argv:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{argv:?}: {e}: {}", out(&o)));
        assert_eq!(v["error"]["exit_code"], 125, "{argv:?}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    let o = h.run(&["run", "--json", "no-such-program-xyz"]);
    assert_eq!(o.status.code(), Some(127));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "spawn");
}

#[test]
fn completions_and_man_page_come_from_the_definitions() {
    let h = Home::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = h.run(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = out(&o);
        assert!(
            script.contains("agentrun") && script.contains("max-lines"),
            "{shell}"
        );
    }
    let bad = h.run(&["completions", "cmd.exe"]);
    assert_eq!(bad.status.code(), Some(125));
    let man = out(&h.run(&["man"]));
    assert!(man.contains(".TH agentrun 1"), "{man}");
    assert!(
        man.contains(".SH \"AGENTRUN RUN\"") && man.contains("\\-\\-byte\\-offset"),
        "{man}"
    );
}

#[test]
fn stores_are_created_only_where_they_can_be() {
    let h = Home::new();
    let deep = h.path("nonexistent/deep/store");
    let o = h.run(&["--store", deep.to_str().unwrap(), "run", "true"]);
    assert_exit_says(&o, 125, "parent directory");
    assert!(!h.path("nonexistent").exists(), "nothing was created");
    // Read-only commands never create a store.
    let missing = h.path("missing-store");
    let m = missing.to_str().unwrap();
    // One rule for the commands over the whole store: say so, list nothing, exit 0.
    for cmd in ["runs", "gc", "verify"] {
        let o = h.run(&["--store", m, cmd]);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", err(&o));
        assert!(out(&o).is_empty(), "{cmd}: {}", out(&o));
        assert!(err(&o).contains("no store at"), "{cmd}: {}", err(&o));
        let o = h.run(&["--store", m, cmd, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{cmd} --json: {}", err(&o));
        let v: serde_json::Value = serde_json::from_str(&out(&o)).expect("json");
        if cmd == "runs" {
            assert_eq!(v, serde_json::json!([]));
        } else {
            assert_eq!(v["store_missing"], m, "{cmd}: {v}");
        }
    }
    let o = h.run(&["--store", m, "show", "x"]);
    assert_exit_says(&o, 125, "no store at");
    let o = h.run(&[
        "--store",
        m,
        "read",
        &format!("artifact://{}", "0".repeat(64)),
    ]);
    assert_exit_says(&o, 125, "no store at");
    for argv in [
        &["runs"][..],
        &["gc"][..],
        &["show", "x"][..],
        &["config"][..],
    ] {
        let mut full = vec!["--store", m];
        full.extend_from_slice(argv);
        h.run(&full);
    }
    assert!(!missing.exists(), "a read-only command created the store");
    // The default location is created with its parents on first run.
    let o = h.run(&["run", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(h.default_store().join("records").is_dir());
}

#[test]
fn agent_usage_mistakes_are_actionable() {
    let h = Home::new();
    let o = h.run(&["agent", "nosuch", "hi"]);
    assert_exit_says(&o, 125, "unknown harness");
    // Without `--` the prompt words are taken as the prompt (the harness is not installed
    // here, so the launch fails with 127 and says so).
    let o = h
        .cmd(&["agent", "claude", "hi"])
        .env("PATH", h.path("empty"))
        .output()
        .unwrap();
    assert_exit_says(&o, 127, "not found");
    // With --json, that failure is JSON on stdout too.
    let o = h
        .cmd(&["agent", "--json", "claude", "hi"])
        .env("PATH", h.path("empty"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["error"]["kind"].as_str(),
            v["error"]["exit_code"].as_i64()
        ),
        (Some("spawn"), Some(127))
    );
}

#[test]
fn live_shows_both_streams_while_the_program_runs() {
    use std::io::{BufRead, BufReader};
    let h = Home::new();
    let (out_marker, err_marker) = (h.path("saw-out"), h.path("saw-err"));
    // The program waits for the test to have seen each line on agentrun's own stdout and
    // stderr, and fails if it does not within 10 s: only live output lets it succeed.
    let wait = |m: &PathBuf| {
        format!(
            "i=0; while [ ! -e '{}' ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.01; done",
            m.display()
        )
    };
    let script = format!(
        "echo to-stdout; {}; echo to-stderr >&2; {}; echo done",
        wait(&out_marker),
        wait(&err_marker)
    );
    let mut child = h
        .cmd(&["run", "--live", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line == "to-stderr" {
                fs::write(&err_marker, b"").unwrap();
            }
            lines.push(line);
        }
        lines
    });
    let mut out_lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line == "to-stdout" {
            fs::write(&out_marker, b"").unwrap();
        }
        out_lines.push(line);
    }
    let status = child.wait().unwrap();
    let err_lines = err_thread.join().unwrap();
    assert_eq!(status.code(), Some(0), "{err_lines:?}");
    // The output as the program printed it, no preview repeated after it.
    assert_eq!(out_lines, ["to-stdout", "done"]);
    assert_eq!(err_lines[0], "to-stderr");
    assert!(
        err_lines[1].contains(" succeeded (exit 0); stdout 2 lines"),
        "{err_lines:?}"
    );
    // And everything was captured.
    assert!(
        err_lines
            .iter()
            .any(|l| l.starts_with("agentrun: stdout: agentrun read "))
    );
    assert!(
        err_lines
            .iter()
            .any(|l| l.starts_with("agentrun: stderr: agentrun read "))
    );
    let conflict = h.run(&["run", "--live", "--json", "true"]);
    assert_eq!(conflict.status.code(), Some(125));
}

/// The exact commands of the newcomer's report, each now succeeding or failing with an
/// actionable message.
#[test]
fn the_commands_from_the_newcomer_report() {
    let h = Home::new();
    // `agentrun run ls` (no `--`).
    let o = h.run(&["run", "ls"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // `echo x | agentrun run -- cat` prints nothing, and now says why in the help and the
    // guide; `--stdin inherit` passes the pipe.
    let mut c = h.cmd(&["run", "--stdin", "inherit", "--", "cat"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"x\n").unwrap();
    }
    assert_eq!(
        out(&child.wait_with_output().unwrap()),
        "[stdout]\nx\n\n[stderr]\n"
    );
    // `run -- ls /nonexistent` exits with ls's own 2; `run --max-lines 0 -- seq 3` is
    // agentrun's usage error, 125, naming the flag.
    let o = h.run(&["run", "--", "ls", "/nonexistent"]);
    assert_exit_says(&o, 2, " failed (exit 2);");
    let o = h.run(&["run", "--max-lines", "0", "--", "seq", "3"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(
        err(&o).contains("'--max-lines <N>'") && err(&o).contains("at least 1"),
        "{}",
        err(&o)
    );
    // `run --json -- false` no longer says succeeded beside exit 1.
    let o = h.run(&["run", "--json", "--", "false"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["status"].as_str(), o.status.code()),
        (Some("failed"), Some(1))
    );
    // A plain `gc` frees what expired, with the retention named.
    let o = h.run(&["gc"]);
    assert!(out(&o).contains("30d retention period"), "{}", out(&o));
    // `--store /nonexistent/deep/store` does not create /nonexistent/deep.
    let deep = h.path("nonexistent/deep/store");
    let o = h.run(&["run", "--store", deep.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(!h.path("nonexistent").exists());
    // `agentrun agent claude hi` is a launch (127 here: no claude on PATH), not a usage error.
    let o = h
        .cmd(&["agent", "claude", "hi"])
        .env("PATH", h.path("empty"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", err(&o));
}

#[test]
fn a_page_before_an_over_long_line_continues_by_byte_offset() {
    let h = Home::new();
    let o = h.run(&[
        "run",
        "sh",
        "-c",
        "echo a; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo after",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let uri = read_commands(&o)[0][1].clone();
    // The first page holds line 0 only; line 1 alone is over a page, so the next read is by
    // byte, from its first byte (a line read of it would be refused).
    let page = h.run(&["read", &uri]);
    assert_eq!(out(&page), "a\n");
    let next = format!("next: agentrun read {uri} --byte-offset 2");
    assert!(err(&page).contains(&next), "{}", err(&page));
    // The JSON page names the same continuation, so a script need not follow `next_offset`
    // into a refused line read.
    let json = h.run(&["read", "--json", &uri]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["next"], serde_json::json!({"byteOffset": 2}), "{v}");
    let bytes = h.run(&["read", "--json", &uri, "--byte-offset", "2"]);
    let v: serde_json::Value = serde_json::from_slice(&bytes.stdout).unwrap();
    assert_eq!(v["next"], serde_json::json!({"byteOffset": 2 + (1 << 20)}));
    let rest = h.run(&["read", "--json", &uri, "--offset", "2"]);
    let v: serde_json::Value = serde_json::from_slice(&rest.stdout).unwrap();
    assert_eq!(v["next"], serde_json::Value::Null, "{v}");
}
