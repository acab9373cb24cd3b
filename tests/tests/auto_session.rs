//! Auto sessions as library calls on both drivers (`agentrun_smol::AutoSession` and
//! `agentrun_tokio::AutoSession`: create, run, resume, outcome), and the one owner of the
//! harness session id: every turn resumes exactly the id the machine recorded and persisted,
//! never one the runner kept beside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use agentrun_core::auto_mode::{AutoMode, AutoModeState, SessionStatus, Settings};
use agentrun_core::harness::Harness;
use agentrun_core::turn::run_session_loop;
use agentrun_fs::Store;
use agentrun_fs::auto_session::SessionDir;

/// A Claude-dialect harness. Call N records its argv, reports the session id on line N of
/// `<dir>/ids` (default `sess-N`), writes `COMPLETE` to the sink when `<dir>/complete-N`
/// exists, and moves itself away when `<dir>/vanish-N` exists (so the next call cannot start
/// it).
fn write_harness(dir: &Path) -> PathBuf {
    let script = format!(
        r#"#!/bin/sh
d='{dir}'
n=$(cat "$d/n" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "$d/n"
printf '%s\n' "$@" > "$d/argv-$n"
id=$(sed -n "${{n}}p" "$d/ids" 2>/dev/null); id=${{id:-sess-$n}}
echo '{{"type":"system","subtype":"init","session_id":"'"$id"'","model":"m"}}'
if [ -e "$d/complete-$n" ]; then printf 'COMPLETE' > "$AGENTRUN_RESULT_SINK"; fi
echo '{{"type":"result","subtype":"success","is_error":false,"result":"turn '"$n"'","session_id":"'"$id"'"}}'
if [ -e "$d/vanish-$n" ]; then mv "$d/claude" "$d/claude.gone"; fi
exit 0
"#,
        dir = dir.display()
    );
    let path = dir.join("claude");
    fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

struct Fixture {
    tmp: tempfile::TempDir,
    calls: PathBuf,
    workspace: PathBuf,
    path_var: String,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let calls = tmp.path().join("calls");
        fs::create_dir(&calls).unwrap();
        let program = write_harness(&calls);
        let workspace = tmp.path().join("work");
        fs::create_dir(&workspace).unwrap();
        let path_var = format!("{}:/usr/bin:/bin", program.parent().unwrap().display());
        Fixture {
            tmp,
            calls,
            workspace,
            path_var,
        }
    }

    fn store(&self) -> Store {
        Store::open(self.tmp.path().join("store")).unwrap()
    }

    fn argv(&self, n: u32) -> String {
        fs::read_to_string(self.calls.join(format!("argv-{n}"))).unwrap()
    }

    /// The session id call `n` resumed (`None`: it started a new harness session).
    fn resumed(&self, n: u32) -> Option<String> {
        let argv = self.argv(n);
        let mut args = argv.lines();
        args.by_ref().find(|a| *a == "--resume")?;
        args.next().map(str::to_owned)
    }

    fn calls_made(&self) -> u32 {
        fs::read_to_string(self.calls.join("n")).map_or(0, |n| n.trim().parse().unwrap())
    }
}

fn settings(workspace: &Path, max_turns: u32) -> Settings {
    Settings {
        objective: "make it so".into(),
        harness: "claude".into(),
        model: None,
        effort: None,
        harness_args: vec![],
        verify: None,
        workspace: Some(workspace.to_string_lossy().into_owned()),
        max_turns,
        result_sink_var: "AGENTRUN_RESULT_SINK".into(),
        harness_resumes: true,
        max_retries: 0,
        retry_backoff_ms: 30_000,
    }
}

fn tokio_block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Runs a session over `AutoModeRunner` and `AutoModeChannel` paired by `run_session_loop`
/// alone on one driver crate: the final state.
macro_rules! drive_pair {
    ($driver:ident, $runtime:expr, $fx:expr, $max_turns:expr) => {{
        let fx: &Fixture = $fx;
        let store = fx.store();
        let dir = SessionDir::create(fx.tmp.path().join("session")).unwrap();
        let machine = AutoMode::new(
            "s-1",
            settings(&fx.workspace, $max_turns),
            SystemTime::now(),
        )
        .unwrap();
        let launch = $driver::HarnessLaunch::new()
            .env("PATH", fx.path_var.clone())
            .workspace(fx.workspace.clone());
        async move {
            let runner = $driver::Runner::new(store);
            let mut session =
                $driver::AutoModeRunner::new(runner.clone(), Harness::Claude, launch, "s-1");
            let mut channel = $driver::AutoModeChannel::new(machine, dir, runner, $runtime)
                .await
                .unwrap();
            run_session_loop(&mut session, &mut channel, || async {})
                .await
                .unwrap();
            channel.state().clone()
        }
    }};
}

/// Call 2 reports a new id, call 3 one the machine refuses (longer than it keeps), calls 4
/// to 6 good ones again: every call resumes what the machine holds, which is what it
/// persisted.
fn check_resumes_follow_the_machine(fx: &Fixture, state: &AutoModeState) {
    assert_eq!(fx.calls_made(), 6);
    assert_eq!(fx.resumed(1), None);
    assert_eq!(fx.resumed(2).as_deref(), Some("sess-a"));
    assert_eq!(fx.resumed(3).as_deref(), Some("sess-b"));
    // The over-long id of call 3 was never recorded, so it is never resumed.
    assert_eq!(fx.resumed(4).as_deref(), Some("sess-b"));
    assert_eq!(fx.resumed(5).as_deref(), Some("sess-d"));
    assert_eq!(fx.resumed(6).as_deref(), Some("sess-e"));
    assert_eq!(state.harness_session_id.as_deref(), Some("sess-f"));
}

fn ids_with_a_refused_one(fx: &Fixture) {
    let long = "x".repeat(300);
    fs::write(
        fx.calls.join("ids"),
        format!("sess-a\nsess-b\n{long}\nsess-d\nsess-e\nsess-f\n"),
    )
    .unwrap();
}

#[test]
fn the_runner_resumes_the_machines_harness_session_on_both_drivers() {
    for tokio_driver in [false, true] {
        let fx = Fixture::new();
        ids_with_a_refused_one(&fx);
        // Max turns 4: clarify, plan, execute and evaluate of turns 3 and 4 (no verdict).
        let state = if tokio_driver {
            tokio_block_on(drive_pair!(
                agentrun_tokio,
                agentrun_tokio::TokioRuntime,
                &fx,
                4
            ))
        } else {
            smol::block_on(drive_pair!(
                agentrun_smol,
                agentrun_smol::SmolRuntime,
                &fx,
                4
            ))
        };
        assert_eq!(
            state.status,
            SessionStatus::Stopped,
            "tokio: {tokio_driver}"
        );
        check_resumes_follow_the_machine(&fx, &state);
    }
}

/// Creates a session with the library call and runs it: the outcome, and the progress
/// events seen.
macro_rules! create_and_run {
    ($driver:ident, $fx:expr, $options:expr) => {{
        let fx: &Fixture = $fx;
        let runner = $driver::Runner::new(fx.store());
        let path_var = fx.path_var.clone();
        let options = $options;
        async move {
            let session = $driver::AutoSession::create(runner, options)
                .await
                .unwrap()
                .env("PATH", path_var);
            let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
            let seen = events.clone();
            let outcome = session
                .run(move |p| {
                    if let $driver::AutoProgress::Event(line) = p {
                        seen.lock().unwrap().push(line.to_owned());
                    }
                })
                .await
                .unwrap();
            let events = events.lock().unwrap().clone();
            (outcome, events)
        }
    }};
}

macro_rules! resume_and_run {
    ($driver:ident, $fx:expr, $dir:expr) => {{
        let fx: &Fixture = $fx;
        let runner = $driver::Runner::new(fx.store());
        let path_var = fx.path_var.clone();
        let dir: PathBuf = $dir;
        async move {
            let session = $driver::AutoSession::resume(runner, dir.to_str().unwrap())
                .await
                .unwrap()
                .env("PATH", path_var);
            session.run(|_| {}).await.unwrap()
        }
    }};
}

#[test]
fn a_library_session_completes_and_reports_its_outcome_on_both_drivers() {
    for tokio_driver in [false, true] {
        let fx = Fixture::new();
        // Call 4 is the evaluation of turn 3.
        fs::write(fx.calls.join("complete-4"), "").unwrap();
        fs::write(fx.workspace.join("marker"), "").unwrap();
        let options = agentrun_smol::AutoSessionOptions::new(Harness::Claude, "make it so")
            .verify("test -f marker")
            .max_turns(5)
            .workspace(&fx.workspace)
            .session_dir(fx.tmp.path().join("session"));
        let (outcome, events) = if tokio_driver {
            tokio_block_on(create_and_run!(agentrun_tokio, &fx, options))
        } else {
            smol::block_on(create_and_run!(agentrun_smol, &fx, options))
        };
        assert_eq!(outcome.end(), &agentrun_smol::AutoEnd::Finished);
        assert_eq!(outcome.status(), SessionStatus::Completed);
        assert_eq!((outcome.exit_code(), outcome.abort()), (0, None));
        assert_eq!(outcome.turn(), 3);
        assert_eq!(outcome.harness_runs(), 4);
        assert_eq!(
            outcome.verification(),
            agentrun_smol::VerificationSummary::Passed
        );
        let summary = outcome.summary();
        assert!(
            summary.ends_with(
                "status completed, 3 of at most 5 turns, 4 harness runs; verification: passed"
            ),
            "{summary}"
        );
        assert!(
            events.iter().any(|e| e.contains("verdict: COMPLETE")),
            "{events:?}"
        );
        // The settings were derived once: the registry says Claude resumes its sessions.
        assert!(outcome.state().settings.harness_resumes);
        let on_disk = SessionDir::open(outcome.dir())
            .unwrap()
            .read_state()
            .unwrap();
        assert_eq!(&on_disk, outcome.state());
    }
}

#[test]
fn a_resumed_session_continues_the_harness_session_the_last_turn_named() {
    for tokio_driver in [false, true] {
        let fx = Fixture::new();
        // Call 2 (plan) names a new harness session, then the harness vanishes: call 3 cannot
        // start, and the session stops there with 127.
        fs::write(fx.calls.join("ids"), "sess-a\nsess-b\n").unwrap();
        fs::write(fx.calls.join("vanish-2"), "").unwrap();
        let options = agentrun_smol::AutoSessionOptions::new(Harness::Claude, "make it so")
            .max_turns(3)
            .workspace(&fx.workspace)
            .session_dir(fx.tmp.path().join("session"));
        let (outcome, _) = if tokio_driver {
            tokio_block_on(create_and_run!(agentrun_tokio, &fx, options))
        } else {
            smol::block_on(create_and_run!(agentrun_smol, &fx, options))
        };
        assert!(
            matches!(
                outcome.end(),
                agentrun_smol::AutoEnd::SpawnFailed { exit_code: 127, .. }
            ),
            "{:?}",
            outcome.end()
        );
        assert_eq!(outcome.exit_code(), 127);
        assert_eq!(outcome.status(), SessionStatus::Running);
        assert_eq!(outcome.harness_runs(), 2);
        assert_eq!(
            outcome.state().harness_session_id.as_deref(),
            Some("sess-b")
        );

        // The harness is back: the resumed session reruns turn 3 from its start, resuming
        // the harness session the plan turn named, and goes on to its end.
        fs::rename(fx.calls.join("claude.gone"), fx.calls.join("claude")).unwrap();
        let dir = outcome.dir().to_owned();
        let outcome = if tokio_driver {
            tokio_block_on(resume_and_run!(agentrun_tokio, &fx, dir))
        } else {
            smol::block_on(resume_and_run!(agentrun_smol, &fx, dir))
        };
        assert_eq!(outcome.end(), &agentrun_smol::AutoEnd::Finished);
        assert_eq!(outcome.status(), SessionStatus::Stopped);
        assert_eq!(outcome.exit_code(), 0);
        assert_eq!(fx.calls_made(), 4);
        assert_eq!(fx.resumed(3).as_deref(), Some("sess-b"));
        assert_eq!(fx.resumed(4).as_deref(), Some("sess-3"));
    }
}

#[test]
fn bad_settings_are_refused_before_anything_is_created() {
    let fx = Fixture::new();
    let session_dir = fx.tmp.path().join("session");
    let runner = agentrun_smol::Runner::new(fx.store());
    let too_few = agentrun_smol::AutoSessionOptions::new(Harness::Claude, "x")
        .max_turns(2)
        .workspace(&fx.workspace)
        .session_dir(&session_dir);
    let err =
        smol::block_on(agentrun_smol::AutoSession::create(runner.clone(), too_few)).unwrap_err();
    assert!(
        matches!(err, agentrun_smol::AutoSessionError::Settings(_)),
        "{err:?}"
    );
    // The core names the concept; the command line adds its flag.
    assert_eq!(
        err.to_string(),
        "the turn limit 2 is too low: auto mode needs at least 3 turns (clarify, plan, execute)"
    );
    let bad_model = agentrun_smol::AutoSessionOptions::new(Harness::Claude, "x")
        .model("-rf")
        .workspace(&fx.workspace)
        .session_dir(&session_dir);
    let err = smol::block_on(agentrun_smol::AutoSession::create(runner, bad_model)).unwrap_err();
    assert!(
        matches!(err, agentrun_smol::AutoSessionError::Launch(_)),
        "{err:?}"
    );
    assert!(!session_dir.exists());
}

/// The library example of docs/auto-mode.md (`cargo run -p agentrun-smol --example
/// auto_session`), compiled and run here as it is.
#[path = "../../drivers/smol/examples/auto_session.rs"]
mod example;

#[test]
fn the_documented_library_example_runs() {
    example::main().unwrap();
}
