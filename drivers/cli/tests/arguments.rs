//! Where agentrun's options end and a program's arguments or a prompt begin, the exit code of a
//! program that cannot be started, durations that make no sense, and a stdout that cannot be
//! written: the command line's edges.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, assert_exit_says, stderr, stdout};

/// The preview `run` prints for a program that wrote `out` on stdout and nothing on stderr.
fn preview(out: &str) -> String {
    format!("[stdout]\n{out}\n[stderr]\n")
}

#[test]
fn everything_after_the_program_belongs_to_it() {
    let env = Sandbox::new();
    for args in [
        &["--version"][..],
        &["-V"],
        &["--help"],
        &["-h"],
        &["--max-lines", "1", "x"],
        &["--json"],
        &["--live"],
        &["--store", "elsewhere"],
        &["--config", "elsewhere"],
        &["--timeout", "1s"],
        &["--", "x"],
        &["x", "--", "--json"],
    ] {
        // Not `echo`: GNU echo has a `--version` of its own.
        let mut argv = vec!["run", "sh", "-c", "printf '%s\\n' \"$*\"", "sh"];
        argv.extend_from_slice(args);
        let o = env.run(&argv);
        assert_eq!(o.status.code(), Some(0), "{argv:?}: {}", stderr(&o));
        let echoed = format!("{}\n", args.join(" "));
        assert_eq!(stdout(&o), preview(&echoed), "{argv:?}");
    }
    // The same after `--`, and with agentrun's own options before the program.
    let o = env.run(&["run", "--max-lines", "1", "--", "printf", "%s\n", "-V"]);
    assert_eq!(stdout(&o), preview("-V\n"));
    let o = env.run(&["run", "--json", "true", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "succeeded", "{v}");
    // The reproducer: the program's `--version`, not agentrun's.
    let cargo = env!("CARGO");
    let o = env.run(&["run", cargo, "--version"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("[stdout]\ncargo "), "{}", stdout(&o));
}

#[test]
fn an_unknown_option_before_the_program_is_an_error_not_the_program() {
    let env = Sandbox::new();
    let o = env.run(&["run", "--tiemout", "5s", "echo", "x"]);
    let err = assert_exit_says(&o, 125, "--tiemout");
    assert!(o.stdout.is_empty(), "the program ran: {}", stdout(&o));
    assert!(!err.contains("cannot run"), "{err}");
    // A `--json` after the program is the program's: the error is not printed as JSON.
    let o = env.run(&["run", "--tiemout", "5s", "jq", "--json"]);
    assert_exit_says(&o, 125, "--tiemout");
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    let o = env.run(&["run", "--json", "--tiemout", "5s", "jq"]);
    assert_eq!(o.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--tiemout"),
        "{v}"
    );
    // A program whose name starts with `-` comes after `--`.
    let o = env.run(&["run", "--", "-no-such-program"]);
    assert_exit_says(&o, 127, "-no-such-program");
}

/// A sandbox with a fake `claude` on `PATH` that writes its argv, each argument followed by a
/// NUL, to `args`, prints the file named in `$REPLAY` if any, and exits 3.
struct Harness {
    sandbox: Sandbox,
    bin: PathBuf,
}

impl Harness {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        let bin = sandbox.path("bin");
        fs::create_dir(&bin).unwrap();
        fs::create_dir(sandbox.path("work")).unwrap();
        let script = bin.join("claude");
        fs::write(
            &script,
            "#!/bin/sh\nprintf '%s\\0' \"$@\" >> \"$ARGS_FILE\"\n[ -z \"$REPLAY\" ] || cat \"$REPLAY\"\nexit 3\n",
        )
        .unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        Self { sandbox, bin }
    }

    fn args_file(&self) -> PathBuf {
        self.sandbox.path("args")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.sandbox.cmd(args);
        let path = format!("{}:/usr/bin:/bin", self.bin.display());
        c.env("PATH", path)
            .env("ARGS_FILE", self.args_file())
            .env("XDG_CONFIG_HOME", self.sandbox.path("config"))
            .current_dir(self.sandbox.path("work"));
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// The arguments the harness was started with, if it was.
    fn launched(&self) -> Option<Vec<String>> {
        let text = fs::read_to_string(self.args_file()).ok()?;
        Some(text.split_terminator('\0').map(str::to_owned).collect())
    }

    /// The prompt `claude` was given: its last argument, after `--`.
    fn prompt(&self) -> String {
        let args = self.launched().expect("the harness was started");
        assert_eq!(args[args.len() - 2], "--", "{args:?}");
        args.last().unwrap().clone()
    }
}

#[test]
fn the_prompt_starts_at_the_first_word_that_is_not_an_option() {
    for (argv, prompt) in [
        (&["fix", "--foo"][..], "fix --foo"),
        (&["fix", "it", "--json"], "fix it --json"),
        (&["--", "--stall-timeuot", "5s"], "--stall-timeuot 5s"),
        (&["--timeout", "5m", "fix", "--", "it"], "fix -- it"),
    ] {
        let h = Harness::new();
        let mut all = vec!["agent", "claude"];
        all.extend_from_slice(argv);
        let o = h.run(&all);
        assert_eq!(o.status.code(), Some(1), "{all:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("claude exited with code 3"),
            "{}",
            stdout(&o)
        );
        assert_eq!(h.prompt(), prompt, "{all:?}");
    }
}

#[test]
fn a_misspelt_option_before_the_prompt_is_refused_by_name() {
    for bad in ["--stall-timeuot", "-x"] {
        let h = Harness::new();
        let o = h.run(&["agent", "claude", bad, "5s", "--", "hi"]);
        let err = assert_exit_says(&o, 125, bad);
        assert!(err.contains("after `--`"), "{err}");
        assert_eq!(h.launched(), None, "the harness was started for {bad}");
    }
}

#[test]
fn the_objective_of_auto_follows_the_same_rule() {
    let h = Harness::new();
    let o = h.run(&["auto", "claude", "make", "it", "pass", "--max-turns", "3"]);
    // The fake fails the clarify turn, which aborts the session with its code.
    assert_exit_says(&o, 3, "clarify");
    let prompt = h.prompt();
    assert!(prompt.contains("make it pass --max-turns 3"), "{prompt}");

    let h = Harness::new();
    let o = h.run(&["auto", "claude", "--max-turn", "3", "make", "it", "pass"]);
    let err = assert_exit_says(&o, 125, "--max-turn");
    assert!(err.contains("after `--`"), "{err}");
    assert_eq!(h.launched(), None, "the harness was started");
    assert!(
        !h.sandbox.store.join("sessions").exists(),
        "a session was created"
    );

    let h = Harness::new();
    let o = h.run(&["auto", "claude", "--", "--literally", "this"]);
    assert_exit_says(&o, 3, "clarify");
    assert!(h.prompt().contains("--literally this"), "{}", h.prompt());
}

#[test]
fn a_program_name_too_long_for_a_file_is_not_found() {
    let env = Sandbox::new();
    // Longer than a file name (255 bytes) and than a path (4096 bytes), looked up in PATH or
    // given as a path: no such file can exist, so it is "not found" (127), not "cannot be
    // executed" (126).
    let long = "a".repeat(5000);
    for program in [
        "a".repeat(300),
        long.clone(),
        format!("/{long}"),
        format!("./{}", "a".repeat(300)),
    ] {
        let o = env.run(&["run", &program]);
        let err = assert_exit_says(&o, 127, "too long");
        assert!(err.contains("cannot run"), "{err}");
        let o = env.run(&["run", "--json", &program]);
        assert_eq!(o.status.code(), Some(127));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["error"]["exit_code"], 127, "{v}");
    }
    // A file that is there but cannot be executed is still 126.
    let script = env.path("not-executable");
    fs::write(&script, "#!/bin/sh\n").unwrap();
    let o = env.run(&["run", script.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
}

#[test]
fn zero_timeouts_are_refused_when_parsed() {
    let h = Harness::new();
    for (argv, option) in [
        (&["run", "--timeout", "0s", "true"][..], "--timeout"),
        (&["run", "--idle-timeout", "0ms", "true"], "--idle-timeout"),
        (&["agent", "claude", "--timeout", "0", "hi"], "--timeout"),
        (
            &["agent", "claude", "--idle-timeout", "0.0s", "hi"],
            "--idle-timeout",
        ),
        (
            &["auto", "claude", "--turn-timeout", "0s", "--", "hi"],
            "--turn-timeout",
        ),
        (&["mcp", "--timeout", "0m"], "--timeout"),
        (
            &[
                "compact",
                "t.json",
                "--summarizer",
                "cat",
                "--timeout",
                "0s",
            ],
            "--timeout",
        ),
    ] {
        let o = h.run(argv);
        let err = assert_exit_says(&o, 125, &format!("'{option} <DURATION>'"));
        assert!(err.contains("zero"), "{argv:?}: {err}");
        assert_eq!(h.launched(), None, "{argv:?} started the harness");
    }
    assert!(
        !h.sandbox.store.join("sessions").exists(),
        "a session was created"
    );
    // A zero grace is meaningful: SIGKILL at once.
    let o = h.run(&["run", "--kill-grace", "0s", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn bad_budgets_and_stall_timeouts_are_refused_when_parsed() {
    let h = Harness::new();
    for (argv, option, says) in [
        (
            &["agent", "claude", "--max-cost-usd", "0", "hi"][..],
            "--max-cost-usd",
            "positive",
        ),
        (
            &["agent", "claude", "--max-cost-usd", "lots", "hi"],
            "--max-cost-usd",
            "not a number",
        ),
        (
            &["auto", "claude", "--max-cost-usd=-1", "--", "hi"],
            "--max-cost-usd",
            "positive",
        ),
        (
            &["auto", "claude", "--max-tokens", "0", "--", "hi"],
            "--max-tokens",
            "0",
        ),
        (
            &["agent", "claude", "--stall-timeout", "soon", "hi"],
            "--stall-timeout",
            "expected",
        ),
    ] {
        let o = h.run(argv);
        let err = assert_exit_says(&o, 125, option);
        assert!(err.contains(says), "{argv:?}: {err}");
        assert_eq!(h.launched(), None, "{argv:?} started the harness");
    }
    assert!(
        !h.sandbox.store.join("sessions").exists(),
        "a session was created"
    );
}

/// `cmd` with stdout on `/dev/full` (every write fails with ENOSPC), or `None` where the system
/// has no `/dev/full`.
fn to_full_disk(mut cmd: Command) -> Option<Output> {
    let Ok(full) = fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: this system has no /dev/full");
        return None;
    };
    Some(cmd.stdout(Stdio::from(full)).output().unwrap())
}

#[test]
fn a_stdout_that_cannot_be_written_is_an_error() {
    let h = Harness::new();
    let seq = ["seq", "1", "100000"];
    for argv in [
        &["run", "--live", "echo", "hi"][..],
        &["run", "--live"],
        &["run"],
        &["run", "--json"],
        &["--help"],
        &["--version"],
        &["run", "--help"],
    ] {
        let mut all = argv.to_vec();
        if all == ["run", "--live"] || all == ["run"] || all == ["run", "--json"] {
            all.extend_from_slice(&seq);
        }
        let Some(o) = to_full_disk(h.cmd(&all)) else {
            return;
        };
        assert_exit_says(&o, 125, "cannot write to stdout");
    }
    // The live output is lost, not the run: it is kept and the footer still names it.
    let Some(o) = to_full_disk(h.cmd(&["run", "--live", "echo", "hi"])) else {
        return;
    };
    assert_exit_says(&o, 125, "agentrun: stdout: agentrun read artifact://");
    // A JSON error that cannot be printed is said on stderr; the exit code is the failure's.
    let Some(o) = to_full_disk(h.cmd(&["run", "--json", "no-such-program-here"])) else {
        return;
    };
    assert_exit_says(&o, 127, "no-such-program-here");
    // `agent`'s status lines, and its progress lines as they come; the footer still says
    // where the session's output is kept.
    let Some(o) = to_full_disk(h.cmd(&["agent", "claude", "hi"])) else {
        return;
    };
    assert_exit_says(&o, 125, "cannot write to stdout");
    let mut replay = h.cmd(&["agent", "claude", "hi"]);
    replay.env("REPLAY", sandbox::fixture(REPLAYED));
    let Some(o) = to_full_disk(replay) else {
        return;
    };
    assert_exit_says(&o, 125, "cannot write to stdout");
    assert_exit_says(&o, 125, "agentrun: stdout: agentrun read artifact://");
}

/// A recorded Claude Code session with progress lines.
const REPLAYED: &str = "claude/agentrun-cyber-discussion-synthetic.jsonl";

/// A stderr that cannot be written (a full device, a closed pipe) loses the diagnostics, never
/// the command: no panic, and the exit code is what it would have been.
#[test]
fn a_stderr_that_cannot_be_written_changes_no_exit_code() {
    let h = Harness::new();
    let Ok(full) = fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: this system has no /dev/full");
        return;
    };
    for (argv, code) in [
        (&["run", "echo", "hi"][..], 0),
        (&["run", "sh", "-c", "exit 3"], 3),
        (&["run", "--max-lines", "1", "seq", "1", "10"], 0),
        (&["runs"], 0),
        (&["run", "no-such-program-here"], 127),
    ] {
        let o = h
            .cmd(argv)
            .stderr(Stdio::from(full.try_clone().unwrap()))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{argv:?}: {o:?}");
    }
    // The same with stderr a pipe whose reader is gone.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = h
        .cmd(&["run", "echo", "hi"])
        .stderr(Stdio::from(writer))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("hi"), "{o:?}");
}
