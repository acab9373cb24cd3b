//! `agentrun fanout` on the real Claude Code, Codex and OpenCode CLIs (installed by
//! `scripts/install-agent-clis.sh` when missing), offline against the scripted model servers
//! of `agentrun_tests::model_server` on 127.0.0.1. The server answers by the model each
//! attempt asks for, and the CLIs run the scripted tool calls for real in their worktrees.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentrun_tests::agent_clis::{self, AgentCli};
use agentrun_tests::model_server::{Api, ModelServer, Reply, Request};
use serde_json::{Value, json};

#[path = "support/sandbox.rs"]
mod sandbox;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
    text(&o.stdout)
}

/// A sandbox with a private home and a git repository with one commit as the workspace.
struct Env {
    sandbox: sandbox::Sandbox,
    home: PathBuf,
    work: PathBuf,
    vars: Vec<(String, String)>,
}

impl Env {
    fn new() -> Env {
        let sandbox = sandbox::Sandbox::new();
        let (home, work) = (sandbox.path("home"), sandbox.path("work"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("README"), "base\n").unwrap();
        git(&work, &["init", "-q"]);
        git(&work, &["add", "README"]);
        git(&work, &["commit", "-qm", "base"]);
        Env {
            sandbox,
            home,
            work,
            vars: Vec::new(),
        }
    }

    /// Adds a CLI's environment; `PATH`s are joined.
    fn with(&mut self, vars: Vec<(String, String)>) {
        for (k, v) in vars {
            match self.vars.iter_mut().find(|(key, _)| *key == k) {
                Some((_, old)) if k == "PATH" => *old = format!("{v}:{old}"),
                Some((_, old)) => *old = v,
                None => self.vars.push((k, v)),
            }
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = self.sandbox.cmd(args);
        c.env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.work);
        c
    }

    fn fanouts(&self) -> PathBuf {
        self.sandbox.store.join("fanouts")
    }

    /// The workspace is as the test made it: one file, a clean status, only the branches
    /// `expected` beside the base's.
    fn assert_untouched(&self, expected: &[&str]) {
        let names: BTreeSet<String> = std::fs::read_dir(&self.work)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, BTreeSet::from([".git".into(), "README".into()]));
        assert_eq!(git(&self.work, &["status", "--porcelain"]), "");
        let branches = git(
            &self.work,
            &[
                "branch",
                "--list",
                "--format=%(refname:short)",
                "agentrun/*",
            ],
        );
        let branches: Vec<&str> = branches.lines().collect();
        assert_eq!(branches, expected);
    }

    /// Every live process whose working directory is inside a fan-out's directory.
    fn leftover_processes(&self) -> Vec<String> {
        let root = std::fs::canonicalize(self.fanouts()).unwrap_or(self.fanouts());
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
                && cwd.starts_with(&root)
            {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                // A zombie holds no directory for long; only running processes count.
                if !stat.contains(") Z ") {
                    found.push(format!("{name}: {}", cwd.display()));
                }
            }
        }
        found
    }
}

fn record(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(o)))
}

fn bash(command: &str) -> Reply {
    Reply::tool_call("Bash", json!({"command": command, "description": "run"}))
}

fn models_seen(server: &ModelServer) -> BTreeSet<String> {
    server
        .model_requests()
        .iter()
        .filter_map(|r| r.model().map(str::to_owned))
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The honest attempt's tool call waits for this file, which the test creates only once all
/// three attempts have talked to the model: so they provably ran at the same time.
fn honest_script(go: PathBuf) -> impl FnMut(&Request) -> Reply + Send + 'static {
    move |request: &Request| {
        let first = request.tool_results().is_empty();
        match (request.model().unwrap_or(""), first) {
            ("claude-honest", true) => bash(&format!(
                "while [ ! -e '{}' ]; do sleep 0.2; done; echo fixed > fixed.txt",
                go.display()
            )),
            ("claude-wrong", true) => bash("echo wrong > wrong.txt"),
            // The lazy one keeps thinking until it is stopped.
            ("claude-lazy", _) => Reply::Hang,
            _ => Reply::text("Done."),
        }
    }
}

fn spawn_fanout(env: &Env, args: &[&str]) -> Child {
    env.command(&[&["fanout", "--json"][..], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn three_claude_code_attempts_race_and_the_verified_one_wins() {
    let mut env = Env::new();
    let go = env.sandbox.path("go");
    let server = ModelServer::start(Api::AnthropicMessages, honest_script(go.clone())).unwrap();
    env.with(agent_clis::claude_env(&env.home, &server).unwrap());
    let child = spawn_fanout(
        &env,
        &[
            "--attempt",
            "claude:claude-lazy",
            "--attempt",
            "claude:claude-honest",
            "--attempt",
            "claude:claude-wrong",
            "--verify",
            "test \"$(cat fixed.txt)\" = fixed",
            "--",
            "make the failing check pass",
        ],
    );
    let all = BTreeSet::from(["claude-honest", "claude-lazy", "claude-wrong"].map(String::from));
    wait_for(
        "all three attempts at the model",
        Duration::from_secs(300),
        || models_seen(&server).is_superset(&all),
    );
    std::fs::write(&go, "").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let r = record(&o);
    assert_eq!(r["winner"], 1, "{r:#}");
    let attempts = r["attempts"].as_array().unwrap();
    let honest = &attempts[1];
    assert_eq!(honest["model"], "claude-honest");
    assert_eq!(honest["status"], "succeeded");
    assert_eq!(honest["verified"], true);
    assert_eq!(honest["verification"]["exit_code"], 0);
    assert_eq!(
        honest["changes"],
        json!({"files": 1, "insertions": 1, "deletions": 0})
    );
    assert!(
        honest["session_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{r:#}"
    );
    let worktree = PathBuf::from(honest["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(worktree.join("fixed.txt")).unwrap(),
        "fixed\n"
    );
    let branch = honest["branch"].as_str().unwrap();
    assert_eq!(
        branch,
        format!("agentrun/{}/1", r["fanout_id"].as_str().unwrap())
    );
    // The change is on the branch, ready to merge.
    assert_eq!(
        git(&env.work, &["diff", "--name-only", "HEAD", branch]),
        "fixed.txt\n"
    );
    // The lazy one was stopped when the honest one won. The wrong one's change failed the
    // verification; on a busy machine the honest one may win first, and the wrong one is
    // then stopped, or its success raced the stop and is recorded unverified.
    assert_eq!(attempts[0]["status"], "stopped", "{r:#}");
    let wrong = &attempts[2];
    assert!(
        wrong["verified"] == false
            || wrong["status"] == "stopped"
            || (wrong["status"] == "succeeded" && wrong["verified"] == Value::Null),
        "{r:#}"
    );
    for loser in [&attempts[0], &attempts[2]] {
        assert_eq!(loser["worktree"], Value::Null, "{r:#}");
        assert_eq!(loser["branch"], Value::Null);
    }
    let kept: Vec<String> = std::fs::read_dir(
        env.fanouts()
            .join(r["fanout_id"].as_str().unwrap())
            .join("worktrees"),
    )
    .unwrap()
    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
    .collect();
    assert_eq!(kept, ["1"], "only the winner's worktree is left");
    env.assert_untouched(&[branch]);
    assert_eq!(env.leftover_processes(), Vec::<String>::new());
    // `show FANOUT` prints the same record.
    let shown = env
        .command(&["show", "--json", r["fanout_id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", describe(&shown));
    assert_eq!(record(&shown), r);
    let human = env
        .command(&["show", r["fanout_id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        text(&human.stdout).contains(&format!("git merge {branch}")),
        "{}",
        describe(&human)
    );
}

#[test]
fn select_all_reports_every_attempts_verification() {
    let mut env = Env::new();
    let server = ModelServer::start(Api::AnthropicMessages, |request: &Request| {
        let first = request.tool_results().is_empty();
        match (request.model().unwrap_or(""), first) {
            ("claude-a", true) => bash("echo fixed > fixed.txt"),
            ("claude-b", true) => bash("echo other > other.txt && echo more >> other.txt"),
            _ => Reply::text("Done."),
        }
    })
    .unwrap();
    env.with(agent_clis::claude_env(&env.home, &server).unwrap());
    let o = env
        .command(&[
            "fanout",
            "--json",
            "--select",
            "all",
            "--attempt",
            "claude:claude-a",
            "--attempt",
            "claude:claude-b",
            "--verify",
            "test -f fixed.txt",
            "--",
            "fix",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let r = record(&o);
    assert_eq!(r["winner"], 0, "{r:#}");
    let a = &r["attempts"];
    assert_eq!(a[0]["verified"], true);
    assert_eq!(a[0]["verification"]["exit_code"], 0);
    assert_eq!(a[1]["status"], "succeeded");
    assert_eq!(a[1]["verified"], false);
    assert_eq!(a[1]["verification"]["exit_code"], 1);
    assert!(a[1]["verification"]["preview"].is_string());
    assert_eq!(
        a[1]["changes"],
        json!({"files": 1, "insertions": 2, "deletions": 0})
    );
    // The loser's change is kept as an artifact although its worktree is gone.
    let patch = a[1]["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .map(|u| env.command(&["read", "--all", u]).output().unwrap())
        .map(|o| text(&o.stdout))
        .find(|t| t.contains("diff --git"))
        .expect("a patch artifact");
    assert!(patch.contains("+more"), "{patch}");
    env.assert_untouched(&[a[0]["branch"].as_str().unwrap()]);
}

#[test]
fn ctrl_c_stops_every_attempt_and_still_writes_the_record() {
    let mut env = Env::new();
    let server = ModelServer::start(Api::AnthropicMessages, |_: &Request| Reply::Hang).unwrap();
    env.with(agent_clis::claude_env(&env.home, &server).unwrap());
    let child = spawn_fanout(
        &env,
        &[
            "--copies",
            "3",
            "claude:claude-slow",
            "--jobs",
            "2",
            "--verify",
            "true",
            "--",
            "think hard",
        ],
    );
    wait_for(
        "two attempts at the model",
        Duration::from_secs(300),
        || server.model_requests().len() >= 2,
    );
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", describe(&o));
    let r = record(&o);
    assert_eq!(r["winner"], Value::Null);
    let statuses: Vec<&str> = r["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["interrupted", "interrupted", "not_started"],
        "{r:#}"
    );
    assert_eq!(env.leftover_processes(), Vec::<String>::new());
    // The record is in the store too.
    let shown = env
        .command(&["show", "--json", r["fanout_id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(record(&shown), r);
    env.assert_untouched(&[]);
}

#[test]
fn claude_code_codex_and_opencode_race_without_a_lock_collision() {
    let mut env = Env::new();
    let mut servers = Vec::new();
    for cli in [AgentCli::Claude, AgentCli::Codex, AgentCli::OpenCode] {
        let server = ModelServer::start(cli.api(), move |request: &Request| {
            if request.tool_results().is_empty() {
                cli.shell_call()
            } else {
                Reply::text("made it")
            }
        })
        .unwrap();
        let vars = match cli {
            AgentCli::Claude => agent_clis::claude_env(&env.home, &server),
            AgentCli::Codex => agent_clis::codex_env(&env.home, &server, "gpt-5.5"),
            _ => agent_clis::opencode_env(&env.home, &server),
        }
        .unwrap();
        env.with(vars);
        servers.push(server);
    }
    let o = env
        .command(&[
            "fanout",
            "--json",
            "--select",
            "all",
            "--attempt",
            "claude",
            "--attempt",
            "codex",
            "--attempt",
            "opencode",
            "--verify",
            "test \"$(cat made.txt)\" = made",
            "--",
            "make the file",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let err = text(&o.stderr);
    assert!(!err.to_lowercase().contains("lock"), "{}", describe(&o));
    let r = record(&o);
    for (n, a) in r["attempts"].as_array().unwrap().iter().enumerate() {
        assert_eq!(a["status"], "succeeded", "attempt {n}: {r:#}");
        assert_eq!(a["verified"], true, "attempt {n}: {r:#}");
        assert!(
            a["session_id"].as_str().is_some_and(|s| !s.is_empty()),
            "{r:#}"
        );
    }
    // Codex ran with a private home seeded from the user's: its session file is there, not
    // in the user's.
    let id = r["fanout_id"].as_str().unwrap();
    let private = env.fanouts().join(id).join("state/1/codex-home");
    assert!(private.join("config.toml").exists());
    assert!(private.join("sessions").is_dir(), "{}", describe(&o));
    assert!(!env.home.join(".codex/sessions").exists());
    assert_eq!(env.leftover_processes(), Vec::<String>::new());
}
